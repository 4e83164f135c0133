"""User text as text: one helper for every value a user controls that reaches a markdown renderer.

Values from a URL, a file name, a task label, a checkpoint's metadata or a display name are shown
as plain text, never interpreted. Streamlit renders most of its string arguments as markdown
(alerts, captions, headings, widget/tab/expander labels, help texts), so each such value goes
through `escape_markdown` first:

- every ASCII punctuation character is backslash-escaped (CommonMark lets any of them be escaped),
  so no emphasis, link, image, heading, HTML tag, math (`$`), colour directive (`:red[…]`) or
  emoji shortcode can form;
- bare `https://…`, `www.…` and `name@host` are defused with an invisible word joiner (U+2060):
  GitHub-flavoured markdown links those *after* escapes are resolved, so escaping alone does not
  stop them.

No Streamlit here: the handout (`sensviz.report`) and the app use the same helper.
"""

from __future__ import annotations

import hashlib
import re
import string

from sensviz.limits import LIMITS

WORD_JOINER = "\u2060"
_PUNCTUATION = re.compile("([" + re.escape(string.punctuation) + "])")
_AUTOLINKS = re.compile(r"(?<=https)(?=://)|(?<=http)(?=://)|(?<=www)(?=\.)|(?<=@)", re.IGNORECASE)


def escape_markdown(value: object) -> str:
    """`value` as a string that any markdown renderer shows exactly as typed, with no link or markup."""
    text = _AUTOLINKS.sub(WORD_JOINER, str(value))
    return _PUNCTUATION.sub(r"\\\1", text)


def short_label(text: str, limit: str = "label_chars") -> str:
    """`text` as is when it is at most the named limit's length; otherwise its start, its length and
    a hash of the whole, e.g. `table:0110…(16,777,216 chars)#a1b2c3d4` (as long as the limit allows)."""
    most = int(LIMITS[limit].high)
    if len(text) <= most:
        return text
    tail = f"…({len(text):,} chars)#{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return text[: max(0, most - len(tail))] + tail
