"""What the Lab page shows, for the parts drawn before it (the sidebar's model summary): which chapter,
and whether its question is still open (no prediction locked on the server by a reveal), so
that nothing drawn around the page shows the answer before the student reveals it."""

from __future__ import annotations

import streamlit as st

from sensviz import lab
from ui import owner_id, page, predictions, registry

LAB = "lab"


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
