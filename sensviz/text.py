"""User text as text: one helper for every value a user controls that reaches a markdown renderer.

Values from a URL, a file name, a task label, a checkpoint's metadata or a display name are shown
as plain text, never interpreted. Streamlit renders most of its string arguments as markdown
(alerts, captions, headings, widget/tab/expander labels, help texts), so each such value goes
through `escape_markdown` first:

- every ASCII punctuation character is backslash-escaped (CommonMark lets any of them be escaped),
  so no emphasis, link, image, heading, HTML tag, math (`$`), colour directive (`:red[…]`) or
  code span can form;
- bare links and shortcodes are defused with an invisible word joiner (U+2060) after every `:`
  and `@` and between `www` and its dot: GitHub-flavoured markdown links `https://…`, `www.…` and
  `name@host`, and Streamlit turns `:smile:` and `:material/…:` into icons, all *after* escapes
  are resolved, so escaping alone does not stop them.

A value of unbounded length (a URL parameter, an error that quotes one) is shown through `quoted`:
one line, at most `SHOWN_CHARS` characters, escaped.

No Streamlit here: the handout (`sensviz.report`) and the app use the same helper.
"""

from __future__ import annotations

import hashlib
import re
import string
import unicodedata

from sensviz.limits import LIMITS

WORD_JOINER = "\u2060"
SHOWN_CHARS = 80
"""The most characters of a user's value that a one-line message quotes (the rest becomes "…")."""

_PUNCTUATION = re.compile("([" + re.escape(string.punctuation) + "])")
_LINK_STARTS = re.compile(r"(?<=[:@])|(?<=www)(?=\.)", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
"""The code points with Unicode's `Default_Ignorable_Code_Point` property (DerivedCoreProperties.txt,
Unicode 15.1), as inclusive ranges."""


def hidden(char: str) -> bool:
    """Whether `char` is drawn as nothing while it changes what a reader sees around it: a default-ignorable
    code point (`DEFAULT_IGNORABLE`: zero-width characters, bidi controls, fillers) or a format character
    (Unicode category Cf)."""
    point = ord(char)
    return unicodedata.category(char) == "Cf" or any(low <= point <= high for low, high in DEFAULT_IGNORABLE)


def without_hidden(text: str) -> str:
    """`text` without its hidden characters (`hidden`): "report\u202egnp.safetensors" no longer reads reversed.
    ASCII has none (every hidden code point is above U+00AC): a long ASCII text is returned at once."""
    if text.isascii():
        return text
    return "".join(c for c in text if not hidden(c))


def escape_markdown(value: object) -> str:
    """`value` as a string that any markdown renderer shows exactly as typed, with no link or markup and
    no hidden character (`without_hidden`)."""
    text = _LINK_STARTS.sub(WORD_JOINER, without_hidden(str(value)))
    return _PUNCTUATION.sub(r"\\\1", text)


def short_label(text: str, limit: str = "label_chars") -> str:
    """`text` as is when it is at most the named limit's length; otherwise its start, its length and
    a hash of the whole, e.g. `table:0110…(16,777,216 chars)#a1b2c3d4` (as long as the limit allows)."""
    most = int(LIMITS[limit].high)
    if len(text) <= most:
        return text
    tail = f"…({len(text):,} chars)#{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return text[: max(0, most - len(tail))] + tail


def one_line(value: object, limit: int = SHOWN_CHARS) -> str:
    """`value` as one line of plain text (whitespace runs as one space, control characters dropped),
    cut to `limit` characters with "…"."""
    text = _CONTROL.sub("", _WHITESPACE.sub(" ", str(value)[: limit * 4])).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quoted(value: object, limit: int = SHOWN_CHARS) -> str:
    """A user's value quoted in a one-line message: `one_line`, then `escape_markdown`."""
    return escape_markdown(one_line(value, limit))
