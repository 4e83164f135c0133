"""Names that people read: a class member's display name and a class's name, refused when they could
pass for another's.

Two names are the same to a reader when their **skeletons** are equal (Unicode TR39, "Unicode
Security Mechanisms", section 4: confusable detection): `skeleton(name)` is the name NFKC-normalised
and case-folded, with every character replaced by one representative of its class of confusables
(the classes are the transitive closure of the pairs in Unicode's confusables.txt, read from the
`confusable-homoglyphs` package's data), and Latin small capitals (ᴀ, ʙ, …, absent from
confusables.txt) folded to their letters. So "Аlice" (Cyrillic А), "Αlice" (Greek Α), "ᴀlice" and
"A1ice" all have the skeleton of "alice".

A name is also refused when it holds an **invisible** character: a default-ignorable code point
(Unicode's DerivedCoreProperties.txt, `Default_Ignorable_Code_Point`: zero-width joiners and spaces,
bidi controls, the Hangul fillers, variation selectors, tags, the soft hyphen, ...) or any other
character of category C (controls, format characters, unassigned), so a name padded with an
invisible filler, or made of one, never stands beside the visible one.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from importlib import resources

from sensviz.text import hidden

_SMALL_CAPITAL = re.compile(r"LATIN LETTER SMALL CAPITAL ([A-Z])")


def invisible(char: str) -> bool:
    """Whether a reader cannot see `char`: hidden (`sensviz.text.hidden`: default-ignorable, a format
    character), or any other character of Unicode category C (controls, unassigned)."""
    return hidden(char) or unicodedata.category(char)[0] == "C"


def check_visible(name: str, what: str) -> None:
    """ValueError (one line, naming `what`) when `name` holds an invisible character."""
    hidden = next((c for c in name if invisible(c)), None)
    if hidden is not None:
        raise ValueError(f"{what} may not hold invisible characters (it has U+{ord(hidden):04X})")


@functools.cache
def _representatives() -> dict[str, str]:
    """Each confusable character -> the representative of its class (the smallest member, so an ASCII
    letter or digit where the class has one): union-find over confusables.txt's pairs."""
    pairs = json.loads(resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8"))
    parent: dict[str, str] = {}

    def find(c: str) -> str:
        while parent.setdefault(c, c) != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    for char, glyphs in pairs.items():
        for glyph in glyphs:
            a, b = find(char), find(glyph["c"])
            if a != b:
                parent[max(a, b)] = min(a, b)
    return {c: find(c) for c in parent}


def _fold(char: str) -> str:
    small = _SMALL_CAPITAL.fullmatch(unicodedata.name(char, ""))
    return small.group(1).casefold() if small else char


def skeleton(name: str) -> str:
    """The TR39-style skeleton of `name` (see the module docstring): equal skeletons look alike."""
    folded = "".join(_fold(c) for c in unicodedata.normalize("NFKC", name).casefold())
    reps = _representatives()
    mapped = "".join(reps.get(c, c) for c in folded)
    return unicodedata.normalize("NFKC", mapped).casefold()
