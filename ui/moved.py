"""A page whose server session was lost says so: the browser reconnected to a server process that did not
hold its session (the replica that served it was stopped, restarted or killed, and the proxy sent the
browser to another one, or to the same one started again), so Streamlit started a new session there.

Streamlit's browser code asks, on every reconnection, for the session it had: the third entry of the
websocket's `Sec-WebSocket-Protocol` header names it. A server that still holds that session resumes it
(the same id, nothing lost); any other starts a new session with a new id. A session whose header names
an id other than its own was therefore moved. What it keeps and what it loses is the serving doc's
"What a student loses" (docs/serving.md): on a Ray cluster a training run goes on; on one server, whose runs
train in its own processes, the run stopped with it and keeps its last measurement (`server.jobs`)."""

from __future__ import annotations

import os

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from server import jobs
from ui import registry

_MOVED = "**This page reconnected to another server process**: the one that served it stopped or restarted. "
_LOST = ("Your kept models open as before (they live in the data folder). What only the old server held is gone: an "
         "upload that was in progress (upload the file again) and page settings that were not in the link.")

NOTICE = _MOVED + "Your training run goes on (runs train on the cluster, not in the web server). " + _LOST
"""What a moved session is told where the runs train on a Ray cluster ($SENSVIZ_RAY_ADDRESS)."""

NOTICE_LOCAL = (_MOVED + "A training run that was going stopped with it and keeps its last measurement (its page says "
                "so, with a button that continues it from there, or runs it again from step 0 where it could not "
                "be saved). " + _LOST)
"""The same where the runs train in the server's own processes (no Ray cluster): they end with it."""


def previous_session(protocol: str | None) -> str | None:
    """The session id a reconnecting browser asks for: the third entry of `Sec-WebSocket-Protocol`
    ("streamlit, <xsrf token>, <session id>"), None when there is none."""
    entries = [entry.strip() for entry in (protocol or "").split(",")]
    return entries[2] if len(entries) >= 3 and entries[2] else None


def was_moved(protocol: str | None, session_id: str | None) -> bool:
    """Whether a session asked for by `protocol` was started afresh as `session_id` (another id)."""
    previous = previous_session(protocol)
    return previous is not None and session_id is not None and previous != session_id


def notice(room: bool = False) -> None:
    """Say, on every run of a moved session until its user dismisses it (a projector's room must not read it all
    lesson long), that it moved and what that cost (read once per session); not on the room's screen (`room`: the
    Class page in projector mode), where nobody has lost anything to be told of."""
    if registry.MOVED not in st.session_state:
        ctx = get_script_run_ctx()
        st.session_state[registry.MOVED] = was_moved(st.context.headers.get("Sec-Websocket-Protocol"),
                                                     ctx.session_id if ctx else None)
    if st.session_state[registry.MOVED] and not room:
        st.info(NOTICE if os.environ.get(jobs.RAY_ADDRESS) else NOTICE_LOCAL, icon=":material/sync_problem:")
        st.button("Dismiss", key=registry.MOVED_DISMISS, on_click=st.session_state.__setitem__,
                  args=(registry.MOVED, False))
