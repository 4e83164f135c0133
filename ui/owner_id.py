"""Who is who: a random owner id, signed by the server (`server.owners`: `id.HMAC(secret, id)`, the secret
kept with mode 0600 in the data folder), lives in a browser cookie (set by a tiny script) and is read back
through `st.context.cookies` when the next session connects; a cookie whose signature does not
check counts as absent (a new id), and without cookies (AppTest) the session keeps its own. The
owner lists and deletes their kept models and has at most one training job. The job queue takes
turns by the client's address (`client_address`), since any script can send any cookie."""

from __future__ import annotations

import streamlit as st

from server.owners import mint_owner, verified_owner
from server.services import server_secret
from ui.registry import OWNER, OWNER_UNSAVED

OWNER_COOKIE = "sensviz_owner"


def owner() -> str:
    """This browser's owner id: from its cookie when the server minted it, else a new one (the frame then saves it)."""
    if OWNER not in st.session_state:
        secret = server_secret()
        cookie = verified_owner(st.context.cookies.get(OWNER_COOKIE), secret)  # no cookies under AppTest
        st.session_state[OWNER] = cookie or mint_owner(secret)
        if cookie is None:
            st.session_state[OWNER_UNSAVED] = True
    return st.session_state[OWNER]


def client_address() -> str:
    """The address this session connects from (`st.context.ip_address`; "local" for localhost), which
    the job queue takes turns by. Behind a proxy it is what docs/explorer.md's class-server paragraph says."""
    return network_address() or "local"


def network_address() -> str | None:
    """The network address this session connects from, None on the server's own machine (localhost: its
    operator, whom the per-address limits of classes do not hold back)."""
    return st.context.ip_address


COOKIES_BLOCKED = ("This browser keeps no cookies for this site, so after a reload (or a restart of the server) "
                   "sensviz takes you for someone new: your models and your run stay with this tab; in a class, your "
                   "rejoin code brings back your place and your run. Allow cookies for this site to keep them all.")


def cookies_blocked() -> bool:
    """Whether this browser keeps no cookies for the site: Streamlit's XSRF cookie, set by the server's answers before
    the session connects, did not come back with the connection (a browser that keeps cookies sends it from its
    first visit on).
    False where that cannot be told: XSRF protection switched off, or no browser (AppTest has no headers)."""
    if not st.get_option("server.enableXsrfProtection"):
        return False
    return bool(st.context.headers) and not st.context.cookies


def owner_cookie_script() -> str | None:
    """The script that stores a new owner id in the browser (None when it came from the cookie)."""
    if not st.session_state.get(OWNER_UNSAVED):
        return None
    return (f"<script>document.cookie = '{OWNER_COOKIE}={owner()}; Path=/; Max-Age=31536000; SameSite=Strict';"
            "</script>")
