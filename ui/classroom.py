"""Class mode in the app (issue 19): the class link, joining, the gallery, the assignment in the Train
form, the class chart. The class itself lives in the library (`server.classes`, `server.assignments`);
this module is its Streamlit glue, used by the frame, the sidebar, the Home, Train and Class pages.

- `class=<code>` in the URL (public, like `model=`) puts the session in a class. A non-member sees
  the class's name and the join form, nothing else; a member sees the classes they joined only.
- `instructor=<private code>` (the instructor link) is checked on the run that brings it, makes the
  session's signed owner id (`ui.owner_id`, its cookie) an instructor of the class, and is removed
  from the URL without a trace in the browser's history (`take_instructor_code`); it is never shown
  again (not in projector mode either).
- Every display name and model name is shown through `escape_markdown` or as a table cell (text).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from sensviz import lab, stats
from sensviz.configs import settings_of
from sensviz.models import ModelSettings
from sensviz.sweeps import read_results
from sensviz.text import escape_markdown, quoted
from sensviz.training import TrainConfig
from server import assignments, jobs, services
from server.classes import Class, ClassRefused
from server.worker import TrainRequest
from ui import cache, model_refs, owner_id, registry, train_form, url_state
from ui.memo import memo

GALLERY_EVERY_S = 3.0
"""How often the gallery and the class chart look for new models and runs (seconds)."""
PROJECTOR_CSS = ("<style>section[data-testid='stSidebar'], [data-testid='stSidebarCollapsedControl'] {display: none;} "
                 "html, .stMarkdown, .stCaption, .stDataFrame {font-size: 150% !important;} "
                 "[data-testid='stCaptionContainer'] {color: #222222 !important; opacity: 1 !important;} "
                 "[data-testid='stMain'] button:disabled {visibility: hidden;} "
                 "[data-testid='stMainBlockContainer'] {padding-top: 1rem !important;} "
                 "[data-testid='stMain'] h1 {display: none;}</style>")
"""Projector mode: no sidebar, large type, captions near black (the theme's grey washes out), no greyed-out buttons
(the gallery's "compare" with nothing open), the page's own title and top margin gone (the class's name stays), so
the class chart sits above the fold of a 1024×768 screen."""

INSTRUCTOR_PARAM = "instructor"
"""The instructor link's parameter (its private code): taken on the first run, never kept in the URL."""
DROP_INSTRUCTOR_SCRIPT = ("<script>{const url = new URL(location.href); if (url.searchParams.has('instructor')) "
                          "{url.searchParams.delete('instructor'); history.replaceState(history.state, '', url);}}</script>")
"""Takes the instructor code out of the browser's current history entry (not only out of a new one)."""


def store():
    return services.class_store()


# ----------------------------------------------------------------------------- entering a class


def take_instructor_code() -> None:
    """The instructor link's private code, on the run that brings it: exchanged for the session's owner id
    (its signed cookie) as an instructor of the class, and taken out of the browser's URL by a script that
    rewrites the current history entry (`DROP_INSTRUCTOR_SCRIPT`). Deleting it from `st.query_params` in the
    same run would push a new entry and leave the code in the one before (Streamlit 1.67's frontend pushes
    on every query-parameter change), so `drop_instructor_code` does that in a later run (the next full
    one, or `_drop_soon`'s), when the browser's URL no longer holds it and Streamlit has nothing to push."""
    private = st.query_params.get(INSTRUCTOR_PARAM)
    if private is None or registry.CLASS_CODE_PENDING in st.session_state:
        return
    st.session_state[registry.CLASS_CODE_PENDING] = "taken"
    st.html(DROP_INSTRUCTOR_SCRIPT, unsafe_allow_javascript=True)
    _drop_soon()
    code = st.query_params.get("class")
    if store().claim_instructor(code, private[:100], owner_id.owner()):
        registry.enter_class(code)
        st.toast("You are this class's instructor in this browser: the instructor link is no longer needed here.")
    else:
        st.warning("That instructor link is not valid on this server (mistyped, or the class was deleted).")


@st.fragment(run_every=GALLERY_EVERY_S)
def _drop_soon() -> None:
    """Drop the code from `st.query_params` on this fragment's first own run (not the full run that drew it)."""
    if st.session_state.get(registry.CLASS_CODE_PENDING) == "taken":
        st.session_state[registry.CLASS_CODE_PENDING] = "drawn"
    else:
        drop_instructor_code()


def drop_instructor_code() -> None:
    """On a run after `take_instructor_code`'s: the code leaves `st.query_params` too."""
    if st.session_state.pop(registry.CLASS_CODE_PENDING, None) and INSTRUCTOR_PARAM in st.query_params:
        del st.query_params[INSTRUCTOR_PARAM]


def enter(code: str) -> None:
    """A `class=` value from the URL: the session is in that class (checked when it is shown)."""
    registry.enter_class(code[:100])


def url_value() -> str | None:
    """The `class=` value to keep in the URL."""
    return registry.current_class()


def class_link(code: str) -> str:
    """The class link for the students (absolute: `ui.url_state.link`)."""
    return url_state.link("lab", {"class": code})


def show_class_link(code: str, warn: bool = True) -> None:
    """The class link in a box to copy. Where it names localhost (the instructor opened the app on the server itself)
    the box shows it at this server's network address, and (`warn`) a warning says why, or that the server listens
    on this computer only (`server.address`), where no student's computer reaches it at all."""
    link = class_link(code)
    if not url_state.loopback(link):
        st.code(link, language=None)
        return
    bound = st.get_option("server.address") or ""
    only_here = url_state.loopback_host(bound)
    others = _elsewhere(link)
    st.code(others[0] if others else link, language=None)
    if not warn:
        return
    said = "You opened the app as **localhost**, which each student's computer reads as itself. "
    if only_here:
        said += (f"This server listens on this computer only (server.address {escape_markdown(bound)}): start it with "
                 "`--server.address 0.0.0.0` for the students to reach it.")
    elif others:
        said += (f"The link above uses this server's network address{'es' if len(others) > 1 else ''}"
                 + (f" (also: {', '.join(others[1:])})" if len(others) > 1 else "") + "; check that a student can open it.")
    else:
        said += "This server shows no network address: give the students the address they reach it at."
    st.warning(said, icon=":material/lan:")


def _elsewhere(link: str) -> list[str]:
    """A link that names localhost at each of this server's network addresses: none where it listens on this
    computer only (`server.address`) or shows none."""
    if url_state.loopback_host(st.get_option("server.address") or ""):
        return []
    return url_state.elsewhere(link, url_state.network_addresses())


def instructor_link(code: str, private: str) -> str:
    """The instructor link (absolute), with the private code that `take_instructor_code` exchanges; at this server's
    network address where the instructor opened it as localhost (a co-instructor's or the projector's computer
    reads localhost as itself)."""
    link = url_state.link("class", {"class": code, INSTRUCTOR_PARAM: private})
    others = _elsewhere(link) if url_state.loopback(link) else []
    return others[0] if others else link


def instructors(found: Class) -> None:
    """The instructor's controls over who else is one: a one-time instructor link, shown in the run of the
    click only (never kept, never shown again; the one before it dies), and Revoke for each other instructor
    (their owner ids are opaque: numbered in the order they became instructors)."""
    me = owner_id.owner()
    with st.expander("Instructors", icon=":material/key:"):
        st.caption(f"{len(found.instructors)} browser{'s' if len(found.instructors) != 1 else ''} with the instructor's "
                   "view of this class (this one included).")
        if st.button("Make a one-time instructor link", key=registry.CLASS_INSTRUCTOR_LINK,
                     help="For another browser of yours or a co-instructor. The first browser that opens it becomes an "
                          "instructor; then the link is dead. Making a new one kills the one before."):
            private = store().instructor_code(found.code, me)
            st.warning("Private: whoever opens this link first gets the instructor's powers. It is shown only now; do "
                       "not project or share this screen.", icon=":material/lock:")
            st.code(instructor_link(found.code, private), language=None)
        for k, other in enumerate(found.instructors, start=1):
            if other == me:
                continue
            if st.button(f"Revoke instructor {k}", key=registry.class_key("revoke", str(k))):
                store().revoke_instructor(found.code, me, other)
                st.rerun()


def joining() -> Class | None:
    """The class whose link this session opened without being in it yet (its join form comes first); not for
    a browser the instructor removed (it is told so instead: `notices`)."""
    code = registry.current_class()
    found = store().get(code) if code else None
    me = owner_id.owner()
    return found if found is not None and store().view(code, me) is None and me not in found.removed else None


def joining_hint(found: Class) -> None:
    """The main area's line for a session that opened a class link: where to join."""
    if owner_id.cookies_blocked():  # after a reload or a restart a member is someone new here: say so first
        st.warning(f"**Joined {escape_markdown(found.name)} before?** This browser keeps no cookies, so after a reload "
                   "or a restart of the server the class no longer knows it: type your rejoin code in the sidebar "
                   "(under the display name) to be yourself again, with your run. New here? Choose a display name "
                   "there.", icon=":material/groups:")
        return
    st.info(f"This is the class link of **{escape_markdown(found.name)}**: choose a display name in the sidebar, "
            "under the list of pages, to join, or give your rejoin code there.", icon=":material/groups:")


def visible() -> Class | None:
    """The session's class when this owner is a member or an instructor of it."""
    code = registry.current_class()
    return store().view(code, owner_id.owner()) if code else None


def is_instructor(found: Class) -> bool:
    return found.is_instructor(owner_id.owner())


def member(found: Class):
    return found.member_of(owner_id.owner())


@dataclass(frozen=True)
class Runs:
    """Whose training runs a session takes as its own: its owner id's (`me`), and the class runs of its member in the
    session's class started from the member's other browsers (`others`: those that joined or rejoined with the
    member's rejoin code). So a browser that keeps no cookies, someone new after a reload or a server restart, gets
    its class run back with its rejoin code; the member's other runs (outside the class) stay with their browser."""

    me: str
    others: tuple[str, ...] = ()
    class_runs: frozenset[str] = frozenset()

    @property
    def owners(self) -> tuple[str, ...]:
        return (self.me, *self.others)

    def owns(self, job_id: str, owner: str) -> bool:
        return owner == self.me or (owner in self.others and job_id in self.class_runs)


def my_runs() -> Runs:
    """This session's `Runs` (its class: `visible`)."""
    me = owner_id.owner()
    found = visible()
    mine = found.member_of(me) if found is not None else None
    if mine is None:
        return Runs(me)
    return Runs(me, tuple(o for o in mine.owners if o != me),
                frozenset(job for job, entry in found.jobs.items() if entry["member"] == mine.id))


# ----------------------------------------------------------------------------- the sidebar


def sidebar() -> None:
    """The class block of the sidebar: the join form for a class link, or the class's models."""
    code = registry.current_class()
    if not code:
        return
    found = store().get(code)
    if found is None:
        st.warning("The class link names no class on this server (mistyped, or the class was deleted).")
        registry.enter_class(None)
        return
    st.header("Class")
    if owner_id.owner() in found.removed:
        st.caption(f"**{escape_markdown(found.name)}** · the instructor removed you")
        return
    if store().view(code, owner_id.owner()) is None:
        join_form(found)
        return
    st.caption(f"**{escape_markdown(found.name)}**" + (" · closed" if found.closed else ""))
    rejoin = st.session_state.get(registry.CLASS_REJOIN, {}).get(found.code)
    if rejoin:
        if owner_id.cookies_blocked():
            st.warning("Write this rejoin code down now: this browser keeps no cookies, so after a reload you are "
                       "someone new here, and this code (typed in the join form) makes you yourself again, with your run.")
        else:
            st.caption("Your rejoin code, for another browser (shown in this session only):")
        st.code(rejoin, language=None)
    live_gallery(found.code, compact=True)
    st.page_link("pages/class.py", label="Class gallery and chart", icon=":material/groups:",
                 query_params={"class": found.code})


def join_form(found: Class) -> None:
    """Join with a display name, or come back with a rejoin code."""
    st.markdown(f"Join the class **{escape_markdown(found.name)}**")
    if found.closed:
        st.info("This class is closed.")
        return
    name = st.text_input("Your display name", key=registry.CLASS_JOIN_NAME, max_chars=40,
                         help="Shown to the class beside your models (letters, digits, spaces and - _ . ').")
    if st.button("Join", key=registry.CLASS_JOIN, type="primary"):
        try:
            joined, rejoin = store().join(found.code, name or "", owner_id.owner(), owner_id.network_address())
        except (ValueError, ClassRefused) as err:
            st.error(f"Not joined: {quoted(err, 200)}")
        else:
            st.session_state.setdefault(registry.CLASS_REJOIN, {})[found.code] = rejoin
            st.rerun()
    code = st.text_input("…or your rejoin code (from another browser, or after a reload that forgot you)",
                         key=registry.CLASS_REJOIN_CODE, max_chars=64)
    if st.button("Rejoin", key=registry.CLASS_REJOIN_BUTTON) and code:
        try:
            store().rejoin(found.code, code.strip(), owner_id.owner())
        except ClassRefused as err:
            st.error(quoted(err, 200))
        else:
            st.rerun()


# ----------------------------------------------------------------------------- the gallery


def _ref(token: str):
    kept = services.kept_store().info(token)
    if kept is None:
        raise ValueError("that model is gone (deleted by its owner, or expired after the class closed)")
    return model_refs.kept_ref(kept.kind, token)


def _open(token: str, compare: bool) -> None:
    """Open a gallery model (`model=`), or put it beside the open one (`compare=`)."""
    try:
        ref = _ref(token)
    except ValueError as err:
        st.warning(quoted(err, 200))
        return
    registry.add_shared(ref)
    current = registry.selected()
    if compare and current is not None and current != ref:
        registry.set_compared(ref)
    else:
        registry.select(ref, show=True)
        if registry.compared() == ref:
            registry.set_compared(None)
    st.rerun()


def gallery_rows(found: Class) -> pd.DataFrame:
    """The gallery as a table: member · task · n · accuracy · the model's name (a run's carries its seed; at
    most 48 characters; a run trained off the running assignment says so, and so does one that ended before its
    last step: stopped, or cut off by a server restart) · when it was added (UTC), so two runs of one setting
    differ; text cells, newest last."""
    names = found.names()
    edited = {job for job, e in found.jobs.items() if found.assignment and not e["assignment"]}  # trained off the assignment
    cut = {job for job, e in found.jobs.items() if e.get("ended") in ("stopped", "failed")}  # its last measurement
    return pd.DataFrame([{"member": names.get(m.member, "?"), "task": m.task, "n": m.n,
                          "accuracy": None if m.accuracy is None else round(float(m.accuracy), 4),
                          "model": (m.name if len(m.name) <= 48 else m.name[:47] + "…")
                          + (f" ({NOT_ASSIGNMENT})" if m.job in edited else "")
                          + (f" ({STOPPED_EARLY})" if m.job in cut else ""),
                          "added": time.strftime("%H:%M:%S", time.gmtime(m.added)), "token": m.token}
                         for m in found.model_list()],
                        columns=["member", "task", "n", "accuracy", "model", "added", "token"])


def gallery(found: Class, compact: bool = False) -> None:
    """Every model of the class, "member · task · n · accuracy · model name (seed) · time added"; one click
    opens one (`model=`) and one click puts another beside it (`compare=`)."""
    store().sync(found.code, services.job_manager())
    found = store().get(found.code) or found
    rows = gallery_rows(found)
    if rows.empty:
        st.caption("No models in the class yet: the models its members train (or upload) while in it appear here.")
        return
    current = registry.selected()
    for row in rows.iloc[::-1].to_dict("records"):
        accuracy = "–" if pd.isna(row["accuracy"]) else f"{row['accuracy']:.1%}"
        label = f"{row['member']} · {row['task']} · n = {row['n']} · {accuracy} · {row['model']} · {row['added']} UTC"
        is_open = current is not None and current.key == row["token"]
        # the buttons' columns hold "compare" in projector type (150 %); the sidebar's row has its button below
        cols = st.columns([3, 1, 1]) if not compact else [st.container(), st.container()]
        cols[0].markdown(("**" if is_open else "") + escape_markdown(label) + ("**" if is_open else ""))
        if cols[1].button("open", key=registry.class_key("open", "c" if compact else "g", row["token"]),
                          help="Select this model (model= in the link)"):
            _open(row["token"], compare=False)
        if not compact and cols[2].button("compare", key=registry.class_key("compare", row["token"]),
                                          disabled=current is None or is_open,
                                          help="Put this model beside the open one (compare= in the link)"):
            _open(row["token"], compare=True)


@st.fragment(run_every=GALLERY_EVERY_S)
def notices(code: str, offer_rerun, train_page: bool = False) -> None:
    """What the room is told (`ClassStore.notices`: removed, closed, a stopped run, one to continue, the assignment
    started), looked at again every `GALLERY_EVERY_S` seconds on its own (a fragment), so it arrives without a
    reload. Every name in it is shown as text. `offer_rerun(status, key)` draws the button that continues a run
    (`ui.job_panel.offer_rerun`). The Train page (`train_page`) says the assignment itself, in the form it fills:
    not here again, with a button that leads to that page."""
    for notice in store().notices(code, owner_id.owner(), services.job_manager()):
        if notice.kind == "assignment" and train_page:
            continue
        if notice.kind == "continue":  # the button here too: the sidebar offers it only while its model is selected
            st.warning(escape_markdown(notice.text), icon=":material/restart_alt:")
            status = services.job_manager().status(notice.job)
            if status is not None:
                offer_rerun(status, key=registry.class_key("notice", "continue"))
        elif notice.kind == "assignment":
            st.info(escape_markdown(notice.text), icon=":material/assignment:")
            if st.button("Open the Train form with my assignment", key=registry.class_key("notice", "train"), type="primary"):
                fill_train_form(force=True)
                st.switch_page("pages/train.py")
        else:
            (st.error if notice.kind == "removed" else st.warning)(escape_markdown(notice.text), icon=":material/campaign:")


@st.fragment(run_every=GALLERY_EVERY_S)
def live_gallery(code: str, compact: bool = False) -> None:
    """`gallery`, drawn again every `GALLERY_EVERY_S` seconds on its own (a fragment): another member's new
    model appears without a reload. In the sidebar it is called inside `with st.sidebar` (the frame's)."""
    found = store().get(code)
    if found is not None:
        gallery(found, compact)


def upload_kept(ref) -> None:
    """A model this session uploaded: into the gallery of its class, when it is a member of an open one."""
    found = visible()
    if found is None or found.closed or member(found) is None:
        return
    facts = cache.model_facts(ref)
    try:
        store().add_model(found.code, owner_id.owner(), ref.key, facts["task"] or "?", facts["default_n"], None, ref.name)
    except ClassRefused as err:
        st.warning(quoted(err, 200))


# ----------------------------------------------------------------------------- the Lab's predictions (peer instruction)


def vote(chapter: int, answer: str) -> None:
    """The Lab's prediction of a member of an open class counts in the class's tally (`ClassStore.vote`)."""
    found = visible()
    if found is not None and not found.closed and member(found) is not None:
        store().vote(found.code, owner_id.owner(), chapter, answer)


def my_votes() -> dict[int, str]:
    """This member's predictions in the session's class, per chapter (`ClassStore.votes_of`): what their Lab ticked
    before a reload or a restart; only answers that are one of their chapter's options (a skip comes with a lock,
    which says it; a chapter's options may have changed since)."""
    found = visible()
    votes = store().votes_of(found.code, owner_id.owner()) if found is not None else {}
    return {number: answer for number, answer in votes.items()
            if 1 <= number <= len(lab.CHAPTERS) and answer in lab.CHAPTERS[number - 1].predict.options}


def reveal_held(chapter: int) -> bool:
    """Whether the instructor holds this chapter's reveal for the session's class: for everyone who opened the Lab
    with the class's link but its instructors (a member waits for it; so does a browser the class forgot after a
    reload or a restart, before it rejoins)."""
    code = registry.current_class()
    found = store().get(code) if code else None
    return (found is not None and not found.closed and not found.is_instructor(owner_id.owner())
            and chapter in found.held)


def predictions_table(found: Class) -> pd.DataFrame:
    """The class's predictions as counts: chapter, question, answer, count, and whether it is the right one once
    the instructor revealed the chapter to the class (before that the column is empty: the room's screen shows it)."""
    rows = []
    for number, counts in store().tally(found.code).items():
        chapter = next((ch for ch in lab.CHAPTERS if ch.number == number), None)
        if chapter is None:
            continue
        right = cache.lab_chapter(number, chapter.control.default).correct if number in found.released else None
        for answer in (*chapter.predict.options, *(a for a in counts if a not in chapter.predict.options)):
            rows.append({"chapter": number, "question": chapter.question, "answer": answer,
                         "count": counts.get(answer, 0), "right": None if right is None else answer == right})
    return pd.DataFrame(rows, columns=["chapter", "question", "answer", "count", "right"])


@st.fragment(run_every=GALLERY_EVERY_S)
def predictions_view(code: str, projector: bool = False) -> None:
    """The instructor's live histogram of the class's Lab predictions per chapter (counts only: nobody's answer),
    Hold/Reveal for the class, and the share right once a chapter is revealed; the counts as a table to download."""
    found = store().get(code)
    table = predictions_table(found) if found is not None else pd.DataFrame()
    if table.empty:
        st.caption("No predictions yet: each member's Lab prediction is counted here, per chapter, before the reveal.")
        return
    for number, rows in table.groupby("chapter", sort=True):
        total = int(rows["count"].sum())
        st.markdown(f"**Chapter {number}.** {escape_markdown(rows['question'].iloc[0])} ({total} prediction"
                    f"{'s' if total != 1 else ''})")
        ink = PROJECTOR_INK if projector else {}
        size = PROJECTOR_TYPE["label"] if projector else 12
        bars = alt.Chart(rows).mark_bar().encode(
            y=alt.Y("answer:N", sort=list(rows["answer"]), title=None, axis=alt.Axis(labelFontSize=size,
                                                                                   labelLimit=400, labelOverlap=False, **ink)),
            x=alt.X("count:Q", title="predictions", axis=alt.Axis(tickMinStep=1, labelFontSize=size, titleFontSize=size,
                                                                  **ink)),
            color=alt.condition("datum.right", alt.value("#009E73"), alt.value("#56B4E9")))
        st.altair_chart(bars.properties(height=alt.Step(44 if projector else 32),  # a band per answer, each labelled
                                        padding={"left": 8, "top": 4, "right": 16, "bottom": 4}))
        # (a total height was shared with the axis: its bands grew too thin, and Vega dropped every other label; the
        # right margin keeps the longest bar and its count's label off the canvas's edge)
        if number in found.released:
            right = int(rows.loc[rows["right"].fillna(False).astype(bool), "count"].sum())
            st.markdown(f"Right: **{right} of {total}** ({right / total:.0%})." if total else "")
        if not projector and is_instructor(found):
            held = number in found.held
            label = "Reveal to the class" if held else "Hold the reveal for the class"
            st.button(label, key=registry.class_key("hold", str(number)),  # changed before the run that draws it
                      on_click=store().hold, args=(code, owner_id.owner(), number), kwargs={"held": not held},
                      help="Members cannot reveal this chapter's answer until you do" if not held else
                      "Every member may reveal the answer now; the share right appears here")
    if not projector:
        st.download_button("Download the counts (CSV)", table.to_csv(index=False).encode(), file_name="predictions.csv",
                           key=registry.class_key("download", "predictions"))


# ----------------------------------------------------------------------------- the assignment


def waiting_to_continue(found: Class) -> dict | None:
    """This member's assignment run that a server restart ended, waiting to be continued
    (`ClassStore.waiting_to_continue`): its class entry (task, n, the cell, the restart's step), or None."""
    me = member(found)
    job_id = store().waiting_to_continue(found.code, me.id, services.job_manager()) if me is not None else None
    return found.jobs.get(job_id) if job_id is not None else None


def assignment_cell(found: Class) -> dict | None:
    """This member's cell of the running assignment (None without an assignment or for a non-member)."""
    me = member(found)
    if me is None or found.assignment not in assignments.ASSIGNMENTS:
        return None
    return store().deal(found.code, services.job_manager()).get(me.id)


def canonical_request(a: assignments.Assignment, cell: dict) -> TrainRequest:
    """The cell's run as the Train form submits it: the assignment's values, every other model and trainer
    setting at its own default, no early stopping. Only a run with exactly this request is an assignment run."""
    values = {**{s.name: s.default for s in (*settings_of(ModelSettings), *settings_of(TrainConfig))}, **a.request(cell)}
    model = {s.name: values[s.name] for s in settings_of(ModelSettings)}
    train = {s.name: None if s.name in train_form.EARLY_STOP else values[s.name] for s in settings_of(TrainConfig)
             if s.name not in train_form.SERVER_SIDE}
    return TrainRequest(task=cell["task"], model=model, train=train, measure_every=int(values["measure_every"]))


def fill_train_form(force: bool = False) -> dict | None:
    """On the Train page: fill the whole form with this member's assignment (`canonical_request`) once per
    cell and session (the member may then change it), or always with `force` (the Class page's button);
    returns the cell."""
    found = visible()
    cell = assignment_cell(found) if found is not None and not found.closed else None
    if cell is None:
        return None
    if force or st.session_state.get(registry.CLASS_FILLED) != (found.code, cell):
        wanted = canonical_request(assignments.ASSIGNMENTS[found.assignment], cell)
        train_form.fill({**wanted.model, **{k: v for k, v in wanted.train.items() if k not in train_form.EARLY_STOP},
                         "task": wanted.task, "measure_every": wanted.measure_every, "early_stop": False})
        st.session_state[registry.TRAIN_PRESET] = None  # the form is the assignment's now, not a preset's
        st.session_state[registry.CLASS_FILLED] = (found.code, cell)
    return cell


NOT_ASSIGNMENT = "not part of the assignment"
STOPPED_EARLY = "stopped before its last step"


def assignment_note(request: TrainRequest) -> str | None:
    """The Train form's line for a member whose form no longer holds their assignment's run (`train_form.form`)."""
    found = visible()
    cell = assignment_cell(found) if found is not None and not found.closed else None
    if cell is None or _matches(assignments.ASSIGNMENTS[found.assignment], cell, request):
        return None
    return (f"These settings differ from your assignment's run ({cell['task']}, n = {cell['n']}, seed {cell['seed']}, "
            f"every other setting the class's): this run would be {NOT_ASSIGNMENT}.")


def _matches(a: assignments.Assignment, cell: dict, request: TrainRequest) -> bool:
    """Whether a run's request is the cell's, every setting included (`canonical_request`)."""
    return request == canonical_request(a, cell)


def class_of_job(job_id: str) -> Class | None:
    """The class of this owner's that counts the job `job_id` (opened with or without its class link)."""
    return next((c for c in store().classes_of(owner_id.owner()) if job_id in c.jobs), None)


def job_started(job_id: str, request, found: Class | None = None, cell: dict | None = None) -> None:
    """A job this session started: the class's, when the session is a member of an open class (`found`, by default
    the session's: `visible`), an assignment run when its settings are `cell`'s (by default the member's cell now)."""
    found = found or visible()
    if found is None or found.closed or member(found) is None:
        return
    cell = cell or assignment_cell(found)
    a = assignments.ASSIGNMENTS.get(found.assignment or "")
    fits = cell is not None and a is not None and _matches(a, cell, request)
    store().add_job(found.code, owner_id.owner(), job_id, request.task, request.train.get("n"), cell if fits else None)


# ----------------------------------------------------------------------------- the class chart


def table_stamp(found: Class) -> tuple | None:
    """The state of the class's runs table on disk (its modification time and size; None before the first run):
    what the table and the chart drawn from it are cached by."""
    try:
        status = (store().sweep_folder(found.code) / "runs.parquet").stat()
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


@memo
def _read_runs(folder: str, stamp: tuple | None) -> pd.DataFrame | None:
    """The runs table of a sweep folder in the state `stamp` (None where it cannot be read)."""
    try:
        runs, _, _ = read_results(Path(folder))
    except (ValueError, OSError):
        return None
    return runs


def class_runs(found: Class) -> pd.DataFrame:
    """The class's runs table (its sweep folder), with each run's member; empty before the first run."""
    runs = _read_runs(str(store().sweep_folder(found.code)), table_stamp(found))
    if runs is None:
        return pd.DataFrame()
    names = found.names()
    ids = runs["member"] if "member" in runs else pd.Series([None] * len(runs), index=runs.index)  # recorded with the run
    by_cell = {(e["assignment"]["task"], e["assignment"]["n"], e["assignment"]["seed"]): e["member"]
               for e in found.jobs.values() if e.get("assignment")}  # a table written before runs named their member
    ids = [i if isinstance(i, str) else by_cell.get((t, n, s)) for i, t, n, s in zip(ids, runs["task"], runs["n"], runs["seed"])]
    return runs.assign(member=[names.get(i, "(removed)") for i in ids])


TASK_STYLE = {"parity": ("#D55E00", "triangle-up", [1, 0]), "first": ("#0072B2", "circle", [8, 5])}
"""Each task's colour (an orange and a blue apart for colour-blind readers), point shape and line dash: the
tasks stay apart in greyscale and on a washed-out projector."""
PROJECTOR_TYPE = {"label": 20, "title": 22, "height": 400, "point": 140}
"""Projector mode's chart at 1024×768, read from the back row: tick and legend labels of 20 px (the room's body text
is 24), titles of 22 px, a plot 400 px high (with its axes, legend and title line it fills over half the screen,
above the fold)."""
SCREEN_TYPE = {"label": 12, "title": 13, "height": 420, "point": 50}
PROJECTOR_INK = {"labelColor": "#000000", "titleColor": "#000000"}
"""Axis and legend text in black on the room's screen: the theme's grey washes out on a projector."""
PROJECTED_VERDICT = {stats.REPRODUCED: "reproduced", stats.DIFFERS: "differs", stats.UNRESOLVED: "not resolved yet"}
"""The verdict in the few words a projector shows in large type (the sentence follows in normal type)."""


YOU = "you"
"""The chart's parameter holding the viewing member's display name (`for_member`): their own point is drawn larger
and outlined. One spec serves every member; only this value differs."""


def chart(a: assignments.Assignment, runs: pd.DataFrame, projector: bool = False) -> alt.LayerChart:
    """Every member's point (the viewer's own larger and outlined: the parameter `YOU`), the mean per setting (a
    line per task): the runs the verdict counts (`server.assignments.counted`: each member's latest finished run).
    Tasks differ by colour, shape and dash (`TASK_STYLE`); a run that did not converge is drawn faint; `projector`:
    the back row's type (`PROJECTOR_TYPE`)."""
    look = PROJECTOR_TYPE if projector else SCREEN_TYPE
    done = assignments.counted(runs).copy()
    done["kept"] = done["converged"].fillna(False).astype(bool).map({True: "converged", False: "not converged"})
    tasks = [t for t in a.tasks if t in TASK_STYLE] + [t for t in a.tasks if t not in TASK_STYLE]
    style = [TASK_STYLE.get(t, ("#444444", "square", [2, 2])) for t in tasks]
    ink = PROJECTOR_INK if projector else {}
    axis = {"labelFontSize": look["label"], "titleFontSize": look["title"], **ink}
    x = alt.X("n:Q", scale=alt.Scale(domain=[min(a.lengths) - 1, max(a.lengths) + 1]), title="input length n",
              axis=alt.Axis(values=list(a.lengths), format="d", **axis))
    y = alt.Y(f"{a.quantity}:Q", title="sharpness L_ρ", axis=alt.Axis(tickCount=5, **axis))
    legend = alt.Legend(orient="top", titleOrient="left", labelFontSize=look["label"], titleFontSize=look["label"],
                        symbolSize=look["point"] * 2, symbolStrokeWidth=0,  # FIRST's dash made its circle ragged
                        **ink)  # one line above: the plot keeps the width and the height
    color = alt.Color("task:N", title="task", legend=legend, scale=alt.Scale(domain=tasks, range=[c for c, _, _ in style]))
    shape = alt.Shape("task:N", title="task", legend=legend, scale=alt.Scale(domain=tasks, range=[m for _, m, _ in style]))
    dash = alt.StrokeDash("task:N", title="task", legend=None,  # merged into the legend, it drew FIRST's circle dashed
                          scale=alt.Scale(domain=tasks, range=[d for _, _, d in style]))
    faint = alt.Opacity("kept:N", title="", legend=legend,
                        scale=alt.Scale(domain=["converged", "not converged"], range=[0.85, 0.3]))
    yours = f"datum.member === {YOU}"
    points = alt.Chart(done).mark_point(filled=True).encode(
        x=x, y=y, color=color, shape=shape, opacity=faint,
        size=alt.condition(yours, alt.value(look["point"] * 4), alt.value(look["point"])),
        stroke=alt.condition(yours, alt.value("black"), alt.value(None)),
        tooltip=["member", "task", "n", "seed", alt.Tooltip(a.quantity, format=".4f", title="sharpness L_ρ (the live monitor's)"),
                 alt.Tooltip("kept:N", title="the run")])  # "converged" or "not converged", not the column's name
    means = alt.Chart(done[done["kept"] == "converged"]).mark_line(strokeWidth=4 if projector else 3).encode(
        x=x, y=alt.Y(f"mean({a.quantity}):Q"), color=color, strokeDash=dash)
    # axes and legend included (Streamlit fits the chart); a margin keeps the y title's ρ off the canvas's edge
    return (points + means).add_params(alt.param(name=YOU, value="")).properties(
        height=look["height"], padding={"left": 8, "top": 4, "right": 8, "bottom": 4})


def for_member(spec: dict, me: str | None) -> dict:
    """The class chart's spec as member `me` sees it (their point marked; None: nobody's): a copy with the `YOU`
    parameter set, the rest shared."""
    return {**spec, "params": [{**p, "value": me or ""} if p.get("name") == YOU else p for p in spec["params"]]}


def chart_section(found: Class, projector: bool = False) -> None:
    """The class chart with the verdict (`server.assignments.verdict`: `sensviz.stats` on the class's table);
    `projector`: the chart in the back row's type and the verdict one line in large type under it."""
    if found.assignment not in assignments.ASSIGNMENTS:
        st.caption("The instructor has not started an assignment yet.")
        return
    a = assignments.ASSIGNMENTS[found.assignment]
    store().sync(found.code, services.job_manager())
    found = store().get(found.code) or found
    runs = class_runs(found)
    me = member(found)
    st.markdown(f"**{escape_markdown(a.title)}**")
    if a.lab_chapter in found.held and (projector or not is_instructor(found)):
        finished = len(assignments.counted(runs)) if "status" in runs else 0  # the runs the chart would draw
        st.info(f"The chart and its verdict wait for the reveal of the Lab's chapter {a.lab_chapter}, whose question "
                f"they answer ({finished} run{'s' if finished != 1 else ''} in so far).",
                icon=":material/visibility_off:")
        return
    if a.lab_chapter in found.held:
        st.caption(f"Hidden from the members and the room's screen while you hold chapter {a.lab_chapter}'s reveal.")
    if not runs.empty and "status" in runs and (runs["status"] == "finished").any():
        # one spec for every member, converted once per content of the table (members and their names in it)
        st.vega_lite_chart(for_member(cache.spec(chart, a, runs, projector), me.name if me else None))
    decided = assignments.verdict(a, runs if not runs.empty else pd.DataFrame(), ended=found.ended)
    if projector:  # one line of large type at 1024 px, the full sentence under it
        st.markdown(f"### Verdict: {PROJECTED_VERDICT[decided.verdict]}")
        st.markdown(escape_markdown(decided.reason[:1].upper() + decided.reason[1:]) + ".")  # not "not resolved" twice
    else:
        (st.success if decided.verdict == "reproduced" else st.info)(f"Verdict: {decided.text}.")
    if decided.interval is not None:
        i = decided.interval
        st.markdown(f"Slope of PARITY minus slope of FIRST: **{i.estimate:.4f}** per unit of n, 95 % interval "
                    f"[{i.low:.4f}, {i.high:.4f}] ({escape_markdown(i.test)}).")
    if not projector:
        st.caption(assignments.describe_short(a))


@st.fragment(run_every=GALLERY_EVERY_S)
def roster(code: str) -> None:
    """The instructor's tables, drawn again every `GALLERY_EVERY_S` seconds on their own (a fragment): the
    members with their assignment (`members_table`), and the runs with their state and progress (`jobs_table`)."""
    found = store().get(code)
    if found is None:
        return
    members_table(found)
    st.markdown("**Runs**")
    jobs_table(found)


def members_table(found: Class) -> None:
    """The members, in the order they joined, with the cell of the assignment each trains next (`ClassStore.deal`)."""
    members = found.member_list()
    dealt = {member: f"{c['task']} n={c['n']} seed {c['seed']}" for member, c in
             store().deal(found.code, services.job_manager()).items()}
    st.caption(f"{len(members)} member{'s' if len(members) != 1 else ''} joined")
    st.dataframe(pd.DataFrame([{"member": m.name, "joined #": m.seat + 1, "assignment": dealt.get(m.id, "")}
                               for m in members], columns=["member", "joined #", "assignment"]),
                 hide_index=True)


RUNS_COLUMNS = {"member": 90, "setting": 115, "state": 105, "reason": 245}
"""The runs table's columns and their widths in px: together they fit the main area of a 1024-px window beside the
sidebar (562 px), and a reason wraps onto up to three lines (`RUNS_ROW_HEIGHT`) instead of running past the edge."""
RUNS_ROW_HEIGHT = 66


def _run_row(row: dict) -> dict:
    """A row of `ClassStore.job_rows` as the runs table shows it: the setting and the state each in one column."""
    seed = f" seed {row['seed']}" if row["seed"] is not None else ""
    step = f", step {row['step']}" if row["step"] else ""
    return {"member": row["member"], "setting": f"{row['task']} n={row['n']}{seed}", "state": row["state"] + step,
            "reason": row["reason"]}


def jobs_table(found: Class) -> None:
    """The instructor's view of the class's jobs: member, setting, state, progress, reason, and Stop."""
    rows = store().job_rows(found.code, services.job_manager())
    if not rows:
        st.caption("No runs yet.")
        return
    runs = [row for row in rows if row["state"] != "continued"]  # a run continued after a restart: one run, two rows
    states = pd.Series([row["state"] for row in runs]).value_counts()
    continued = len(rows) - len(runs)
    st.caption(f"{len(runs)} run{'s' if len(runs) != 1 else ''}: " + ", ".join(f"{k} {v}" for k, v in states.items())
               + (f" ({continued} of them continued after a restart)" if continued else ""))
    st.dataframe(pd.DataFrame([_run_row(row) for row in rows], columns=list(RUNS_COLUMNS)), hide_index=True,
                 row_height=RUNS_ROW_HEIGHT, column_config={name: st.column_config.TextColumn(width=width)
                                                            for name, width in RUNS_COLUMNS.items()})
    for row in rows:
        if row["state"] in jobs.ACTIVE:
            who = f"{row['member']}'s run" if row["member_id"] in found.names() else "the run of a removed member"
            label = f"Stop {who} ({row['task']}, n = {row['n']}, {row['state']})"
            if st.button(escape_markdown(label), key=registry.class_key("stop", row["job"])):
                store().stop(found.code, owner_id.owner(), row["job"], services.job_manager())
                st.rerun(scope="fragment")
