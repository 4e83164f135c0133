"""How full each page of a PDF printed by Chromium (Skia) is: the lowest drawn mark on the page (text, a
filled or stroked path, an image; not a clip, not a white fill) as a share of the page's height. Reads the
page objects and their Flate content streams with the standard library only, following q/Q and cm."""

from __future__ import annotations

import re
import zlib

_NUMBER = rb"-?\d*\.?\d+"
_TOKEN = re.compile(rb"(" + _NUMBER + rb")|(/[^\s/\[\]<>()]+)|(<[0-9A-Fa-f]*>)|(\[[^\]]*\])|([A-Za-z*'\"]+)")


def _objects(pdf: bytes) -> dict[int, bytes]:
    starts = [(int(m.group(1)), m.start()) for m in re.finditer(rb"(\d+) 0 obj", pdf)]
    return {n: pdf[s:pdf.index(b"endobj", s)] for n, s in starts}


def _stream(body: bytes) -> bytes:
    raw = body[body.index(b"stream") + 6:body.rindex(b"endstream")].strip(b"\r\n")
    return zlib.decompress(raw) if b"/FlateDecode" in body[:body.index(b"stream")] else raw


def _mul(a, b):
    """The matrix a then b (PDF order: [a b c d e f])."""
    return (a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2],
            a[2] * b[1] + a[3] * b[3], a[4] * b[0] + a[5] * b[2] + b[4], a[4] * b[1] + a[5] * b[3] + b[5])


def _lowest(content: bytes, height: float) -> float:
    """The largest distance from the page's top of any drawn mark (in points)."""
    ctm, stack, args, path, white, lowest = (1, 0, 0, 1, 0, 0), [], [], [], False, 0.0

    def mark(x, y, m):
        nonlocal lowest
        lowest = max(lowest, height - (x * m[1] + y * m[3] + m[5]))

    for number, _name, _, _, op in (m.groups() for m in _TOKEN.finditer(content)):
        if number is not None:
            args.append(float(number))
            continue
        if op is None:
            continue
        if op == b"q":
            stack.append(ctm)
        elif op == b"Q":
            ctm = stack.pop() if stack else ctm
        elif op == b"cm" and len(args) >= 6:
            ctm = _mul(tuple(args[-6:]), ctm)
        elif op == b"rg" and len(args) >= 3:
            white = all(v >= 0.99 for v in args[-3:])
        elif op == b"re" and len(args) >= 4:
            x, y, w, h = args[-4:]
            path += [(x, y), (x + w, y + h)]
        elif op in (b"m", b"l", b"c") and len(args) >= 2:  # a curve's end point (its control points: near it)
            path.append(tuple(args[-2:]))
        elif op in (b"W", b"W*", b"n"):
            path = [] if op == b"n" else path
        elif op in (b"f", b"f*", b"F", b"B", b"B*", b"S", b"s", b"b", b"b*"):
            if not (white and op in (b"f", b"f*", b"F")):
                for x, y in path:
                    mark(x, y, ctm)
            path = []
        elif op == b"Tm" and len(args) >= 6:
            mark(args[-2], args[-1], ctm)
        elif op == b"Do":
            mark(0, 0, ctm)
            mark(1, 1, ctm)
        args = []
    return lowest


def page_fill(pdf: bytes) -> list[float]:
    """For each page in order, the share of its height down to its lowest drawn mark."""
    objects = _objects(pdf)
    pages = [body for body in objects.values() if re.search(rb"/Type /Page\b(?!s)", body)]
    fills = []
    for body in pages:  # Skia writes the pages in the document's order
        height = float(re.search(rb"/MediaBox \[\s*" + _NUMBER + rb"\s+" + _NUMBER + rb"\s+" + _NUMBER + rb"\s+(" + _NUMBER
                                 + rb")\]", body).group(1))
        refs = re.search(rb"/Contents\s+(\d+) 0 R", body)
        content = _stream(objects[int(refs.group(1))]) if refs else b""
        fills.append(_lowest(content, height) / height)
    return fills
