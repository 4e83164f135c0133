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

from sensviz.limits import LIMITS

WORD_JOINER = "\u2060"
SHOWN_CHARS = 80
"""The most characters of a user's value that a one-line message quotes (the rest becomes "…")."""

_PUNCTUATION = re.compile("([" + re.escape(string.punctuation) + "])")
_LINK_STARTS = re.compile(r"(?<=[:@])|(?<=www)(?=\.)", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def escape_markdown(value: object) -> str:
    """`value` as a string that any markdown renderer shows exactly as typed, with no link or markup."""
    text = _LINK_STARTS.sub(WORD_JOINER, str(value))
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
