"""URL state. Every view is a link: the public parameters `model`, `compare`, `n` and `job`, the
same on every page, and each page's own settings (declared in its `PAGE`, drawn through
`ui.page.Settings`, kept here by `setting` / `set_setting`). On the first run of a session (a link,
a reload) the URL says what to show; afterwards the session does, and every run writes the URL
again (Streamlit clears the query string on a page switch). A bad or stale parameter becomes a
one-line notice and the default."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import socket
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlencode, urlsplit

import streamlit as st

from sensviz.text import quoted
from ui.registry import NOTICES, PAGE_SETTINGS, URL_READ, URL_SETTINGS

T = TypeVar("T")

PUBLIC = ("model", "compare", "n", "job", "class")
"""The parameters every page shares (`class`: the class this session is in, `ui.classroom`)."""
URL_VALUE_CHARS = 1000
"""The longest URL parameter (name or value) read; a longer one is a notice, before any parsing."""


def read_url() -> dict[str, str] | None:
    """On the first run of a session: the URL's public parameters (the page's own are kept for
    `setting`); None on later runs, where the session says what to show."""
    if st.session_state.get(URL_READ):
        return None
    st.session_state[URL_READ] = True
    st.session_state[NOTICES] = []
    incoming = {}
    for name, value in st.query_params.to_dict().items():
        if len(name) > URL_VALUE_CHARS or len(value) > URL_VALUE_CHARS:
            notice(f"{quoted(name)}={quoted(value)} was not used: longer than {URL_VALUE_CHARS:,} characters.")
            write_url({name: None})
        else:
            incoming[name] = value
    st.session_state[URL_SETTINGS] = {k: v for k, v in incoming.items() if k not in PUBLIC}
    return {k: v for k, v in incoming.items() if k in PUBLIC}


def write_url(values: dict[str, str | None]) -> None:
    """Put these parameters in the URL (None removes one); unchanged ones send nothing."""
    for name, value in values.items():
        if value is None:
            if name in st.query_params:
                del st.query_params[name]
        elif st.query_params.get(name) != value:
            st.query_params[name] = value


def link(page: str, params: dict[str, str]) -> str:
    """An absolute link to `page` (its URL path, "" for Home) with these parameters, for the user to send:
    the app's address as this user's browser reaches it (`st.context.url`'s scheme and host, and the
    server's `baseUrlPath`). Relative where no browser sent its address (AppTest without `context`)."""
    browser = st.context.url
    path = "/" + "/".join(part for part in (st.get_option("server.baseUrlPath").strip("/"), page) if part)
    path += f"?{urlencode(params)}" if params else ""
    if not browser:
        return path
    parts = urlsplit(browser)
    return f"{parts.scheme}://{parts.netloc}{path}"


LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


def loopback(link: str) -> bool:
    """Whether an absolute link names this computer to itself only (localhost, 127.0.0.1, ::1): another computer
    that opens it reaches itself."""
    return loopback_host(urlsplit(link).hostname or "")


def loopback_host(host: str) -> bool:
    """Whether a host name or address (a link's, or `server.address`) is this computer's loopback."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=1)
def network_addresses() -> tuple[str, ...]:
    """This computer's IPv4 addresses that others may reach it at: the one its default route leaves from (a UDP
    socket's connect sends nothing) and its host name's; loopback ones left out. Looked up once per server process
    (the host name's lookup may wait on a resolver; the Class page draws the link on every run)."""
    found = []
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the interface
        found.append(probe.getsockname()[0])
    with contextlib.suppress(OSError):
        found += [info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
    return tuple(a for a in dict.fromkeys(found) if not ipaddress.ip_address(a).is_loopback)


def elsewhere(link: str, addresses) -> list[str]:
    """The same link at each of these addresses (its scheme, port, path and query kept)."""
    parts = urlsplit(link)
    port = f":{parts.port}" if parts.port else ""
    return [parts._replace(netloc=f"{address}{port}").geturl() for address in addresses]


def keep_only(allowed: tuple[str, ...]) -> None:
    """Remove the URL parameters of other pages (a browser clears them on a page switch; be sure)."""
    write_url({name: None for name in list(st.query_params) if name not in PUBLIC and name not in allowed})


def check_url_params(allowed: tuple[str, ...]) -> None:
    """Notice (and drop) parameters of the first run's URL that this page does not know."""
    unknown = [k for k in st.session_state.get(URL_SETTINGS, {}) if k not in allowed]
    if not unknown:
        return
    named = ", ".join(quoted(name, 40) for name in unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
    notice(f"{named} {'is' if len(unknown) == 1 else 'are'} not a setting of this page; ignored.")
    for name in unknown:
        st.session_state[URL_SETTINGS].pop(name)
        write_url({name: None})


def notice(text: str) -> None:
    """A one-line notice about the URL, shown at the top of the page as markdown: every value of the
    URL in it is quoted with `sensviz.text.quoted` (escaped, one bounded line)."""
    st.session_state.setdefault(NOTICES, []).append(text)


def take_notices() -> list[str]:
    return st.session_state.pop(NOTICES, [])


def setting(page: str, param: str, default: T, parse: Callable[[str], T]) -> T:
    """A page setting: what the session chose last (a setting left at its default follows the
    default, which may depend on the model), else the first run's URL value (`parse` raises
    ValueError for a bad one: notice, and the default), else `default`."""
    settings = st.session_state.setdefault(PAGE_SETTINGS, {})
    if (page, param) in settings:
        value, old_default = settings[(page, param)]
        return default if value == old_default else value
    raw = st.session_state.get(URL_SETTINGS, {}).pop(param, None)
    value = default
    if raw is not None:
        try:
            value = parse(raw)
        except ValueError as err:
            notice(f"{param}={quoted(raw)} was not used: {quoted(err, 200)}. Showing the default.")
    settings[(page, param)] = (value, default)
    return value


def kept(page: str, param: str) -> bool:
    """Whether the session holds a value of this page setting (so the URL's was read, if any)."""
    return (page, param) in st.session_state.get(PAGE_SETTINGS, {})


def set_setting(page: str, param: str, value, default, fmt: Callable[[object], str] = str) -> None:
    """Remember a page setting and put it in the URL (left out when it is the default)."""
    st.session_state.setdefault(PAGE_SETTINGS, {})[(page, param)] = (value, default)
    write_url({param: None if value == default else fmt(value)})
