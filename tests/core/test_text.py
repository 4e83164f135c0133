"""`sensviz.text`: user text shown as text. Every ASCII punctuation character is escaped, bare links
and shortcodes are defused, and one-line quotes are bounded (the browser check is tests/browser/test_e2e.py)."""

import re
import string

import pytest
from helpers.core import HOSTILE

from sensviz.text import SHOWN_CHARS, WORD_JOINER, escape_markdown, one_line, quoted

GFM_AUTOLINKS = (re.compile(r"(https?://|www\.)", re.IGNORECASE), re.compile(r"[-.\w+]+@[-\w]+(\.[-\w]+)+"),
                 re.compile(r"(mailto|xmpp):[-.\w+]+@", re.IGNORECASE))
"""What GitHub-flavoured markdown links in text whose escapes are already resolved (mdast-util-gfm-autolink-literal)."""


def resolved(escaped: str) -> str:
    """The text a markdown renderer shows: backslash escapes resolved (the word joiners stay)."""
    return re.sub(r"\\([" + re.escape(string.punctuation) + "])", r"\1", escaped)


def bare_punctuation(escaped: str) -> list[str]:
    """Punctuation characters that are not escaped by a backslash."""
    bare, i = [], 0
    while i < len(escaped):
        if escaped[i] == "\\":
            i += 2
            continue
        if escaped[i] in string.punctuation:
            bare.append(escaped[i])
        i += 1
    return bare


@pytest.mark.parametrize("char", list(string.punctuation))
def test_every_ascii_punctuation_character_is_escaped(char):
    escaped = escape_markdown(f"a{char}b{char}{char}")
    assert bare_punctuation(escaped) == []
    assert resolved(escaped).replace(WORD_JOINER, "") == f"a{char}b{char}{char}"


@pytest.mark.parametrize("value", HOSTILE)
def test_markup_is_shown_as_typed(value):
    escaped = escape_markdown(value)
    assert bare_punctuation(escaped) == []
    assert resolved(escaped).replace(WORD_JOINER, "") == value


@pytest.mark.parametrize("value", [
    "https://evil.invalid/x", "HTTP://EVIL.INVALID", "hTtPs://evil.invalid", "www.evil.invalid", "WWW.Evil.invalid",
    "see me@evil.invalid", "mailto:me@evil.invalid", "xmpp:me@evil.invalid", "http://127.0.0.1:9/", "a https://x.y b",
])
def test_bare_links_and_emails_are_defused(value):
    text = resolved(escape_markdown(value))
    assert text.replace(WORD_JOINER, "") == value  # shown as typed, with invisible joiners
    assert not any(pattern.search(text) for pattern in GFM_AUTOLINKS), text


def test_plain_words_are_untouched():
    assert escape_markdown("parity n 8 encoder") == "parity n 8 encoder"
    assert escape_markdown(42) == "42"


def test_one_line_is_one_bounded_line():
    assert one_line("a\n\nb\tc\x00d\x1b") == "a b cd"
    long = one_line("x" * 100_000)
    assert len(long) == SHOWN_CHARS and long.endswith("…")
    assert one_line("short") == "short"
    assert "\n" not in quoted("[a](https://evil.invalid)\n# b" * 10_000)
    assert len(resolved(quoted("[" * 100_000)).replace(WORD_JOINER, "")) == SHOWN_CHARS


def test_shown_text_has_no_hidden_character():
    from sensviz.text import escape_markdown, without_hidden

    assert without_hidden("report\u202egnp\u2066.safetensors\u3164") == "reportgnp.safetensors"
    assert escape_markdown("Ada\u200d\u202e") == "Ada" and escape_markdown("line\nbreak") == "line\nbreak"  # newlines stay
