"""What the Lab page shows, for the parts drawn before it (the sidebar's model summary): which chapter,
and whether its question is still open (no prediction locked on the server by a reveal), so
that nothing drawn around the page shows the answer before the student reveals it.

The sidebar's summary on every other page follows one rule (`withheld`): for a student of the Lab (this session
opened it, or this browser revealed a chapter), a number that answers a chapter's question (`ANSWERS`) is shown only
once that chapter is revealed; a session that never opened the Lab sees every number."""

from __future__ import annotations

import streamlit as st

from sensviz import lab
from ui import classroom, owner_id, page, predictions, registry

LAB = "lab"
ANSWERS = {"as_model": 1, "as_target": 1, "param_norm": 3, "blowup_mean": 3}
"""The sidebar summary's numbers that answer a Lab chapter, and that chapter: as_n (chapter 1: the PARITY model's is n),
param_norm and mean Blowup (chapter 3: the PARITY model's weights or LayerNorm blowup are the larger)."""


def chapter_shown() -> int:
    """The chapter the Lab page draws on this run: its widget's value, else the URL's, else 1."""
    value = st.session_state.get(page.Settings(LAB).key("chapter"))  # the Lab's own chapter control
    if value is None:
        raw = st.query_params.get("chapter", "1")
        value = int(raw) if raw.isascii() and raw.isdigit() else 1
    return value if isinstance(value, int) and 1 <= value <= len(lab.CHAPTERS) else 1


def revealed(number: int) -> bool:
    """Whether chapter `number`'s answer was revealed: its prediction locked on the server (a prediction ticked
    but not revealed, or one a link pre-selects, keeps the question open)."""
    return number in predictions.locked(owner_id.owner())


def question_open() -> bool:
    """Whether this run draws the Lab with its chapter's question still open."""
    return st.session_state.get(registry.PAGE) == LAB and not revealed(chapter_shown())


def started() -> bool:
    """Whether this browser works through the Lab: this session opened it, its owner revealed a chapter, or its owner
    is a member of the session's class (a class works through the Lab: the session a restart or a reload starts is
    still its student's, before it opens the Lab again)."""
    if registry.LAB_PREDICTIONS in st.session_state or predictions.locked(owner_id.owner()):
        return True
    found = classroom.visible()
    return found is not None and classroom.member(found) is not None


def withheld() -> dict[str, int]:
    """The sidebar summary's numbers this run may not show (`ANSWERS`), by the chapter they wait for: all of them
    on the Lab with its question open, those of chapters not yet revealed for a student of the Lab, else none."""
    if question_open():
        return dict(ANSWERS)
    if not started():
        return {}
    locks = predictions.locked(owner_id.owner())
    return {name: number for name, number in ANSWERS.items() if number not in locks}


def waiting_words(waiting: dict[str, int], labels: dict[str, str]) -> str:
    """A line naming the withheld numbers and the chapters they wait for ('' when none)."""
    if not waiting:
        return ""
    by_chapter: dict[int, list[str]] = {}
    for name, number in waiting.items():
        by_chapter.setdefault(number, []).append(labels[name])
    return "Waiting for your answer in the Lab: " + "; ".join(
        f"{', '.join(names)} (chapter {number})" for number, names in sorted(by_chapter.items())) + "."
