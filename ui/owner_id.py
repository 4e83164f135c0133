"""Who is who: a random owner id lives in a browser cookie (set by a tiny script) and is read back
through `st.context.cookies` when the next session connects; without cookies (AppTest) the session
keeps its own. The owner lists and deletes their kept models and has at most one training job."""

from __future__ import annotations

import re
import secrets

import streamlit as st

from ui.registry import OWNER, OWNER_UNSAVED

OWNER_COOKIE = "sensviz_owner"
_OWNER_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")


def owner() -> str:
    """This browser's owner id: from its cookie, else a new one (the frame then saves it)."""
    if OWNER not in st.session_state:
        cookie = st.context.cookies.get(OWNER_COOKIE)
        if isinstance(cookie, str) and _OWNER_ID.match(cookie):  # no cookies under AppTest
            st.session_state[OWNER] = cookie
        else:
            st.session_state[OWNER] = secrets.token_urlsafe(16)
            st.session_state[OWNER_UNSAVED] = True
    return st.session_state[OWNER]


def owner_cookie_script() -> str | None:
    """The script that stores a new owner id in the browser (None when it came from the cookie)."""
    if not st.session_state.get(OWNER_UNSAVED):
        return None
    return (f"<script>document.cookie = '{OWNER_COOKIE}={owner()}; Path=/; Max-Age=31536000; SameSite=Strict';"
            "</script>")
