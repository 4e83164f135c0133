"""Class: the class's gallery, its members' runs of the assignment on one chart with the verdict, and
the instructor's view (members, assignment, jobs with Stop, the class's tables, close and delete).
Projector mode (`projector=1`): the class link (to the instructor), the gallery and the chart in large type, without
the sidebar."""

import streamlit as st

from sensviz.text import escape_markdown, quoted
from server import assignments, services
from server.classes import ClassRefused
from ui import classroom, owner_id, page, registry, router

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "Class",
    "section": "Start",
    "icon": ":material/groups:",
    "settings": {  # its own, under their URL parameters (ui.nav.Setting)
        "projector": {"label": "Projector mode", "widget": "toggle"},
    },
    "shows": ("a class's room: every member's models side by side (one click compares two), the length-scaling "
              "assignment dealt across the class with its live chart and verdict, the instructor's view; projector mode"),
}

found = classroom.visible()
if found is None:
    mine = classroom.store().classes_of(owner_id.owner())
    if classroom.joining() is not None:
        pass  # the frame says where to join (`classroom.joining_hint`)
    elif mine:
        st.markdown("Your classes:")
        for c in mine:  # a button, not a link: `class=` in the URL is read on a session's first run only
            if st.button(escape_markdown(c.name), key=registry.class_key("enter", c.code), icon=":material/groups:"):
                classroom.enter(c.code)
                st.rerun()
    else:
        st.info("Open your class link (from your instructor) to join a class, or create one on the Home page, under "
                "“Create a class”.")
        st.page_link("pages/home.py", label="Create a class on the Home page", icon=":material/groups:")
    st.stop()

projector = page.Settings("class").flag("projector", help="Large type, no sidebar: for the room's screen.")
if projector:
    st.html(classroom.PROJECTOR_CSS)
st.subheader(escape_markdown(found.name) + (" (closed)" if found.closed else ""))
if projector and classroom.is_instructor(found) and not found.closed:  # the room's screen: where to join, first
    st.markdown("Join the class at")
    classroom.show_class_link(found.code, warn=False)  # the room's screen: the link alone (the instructor's view warns)
me = classroom.member(found)
if me is not None and not projector:
    st.caption(f"You are **{escape_markdown(me.name)}** in this class.")
    if st.button("Show a rejoin code for another browser", key=registry.CLASS_NEW_REJOIN,
                 help="Type it in the class's join form in another browser to be yourself there. A new code kills the one "
                      "before."):
        st.code(classroom.store().new_rejoin_code(found.code, owner_id.owner()), language=None)


@st.fragment(run_every=classroom.GALLERY_EVERY_S)
def live_chart():
    now = classroom.store().get(found.code)
    if now is not None:
        classroom.chart_section(now, projector)


def gallery():
    st.markdown("### Gallery")
    classroom.live_gallery(found.code)


def class_chart():
    if not projector:  # on the room's screen the chart comes first, under the class's name
        st.markdown("### Class chart")
    live_chart()


def lab_predictions():
    if classroom.is_instructor(found):  # counts only; the members see their own prediction, never the room's
        st.markdown("### The class's predictions")
        classroom.predictions_view(found.code, projector)


for part in (class_chart, lab_predictions, gallery) if projector else (gallery, class_chart, lab_predictions):
    part()  # the room's screen: the chart and the predictions first

cell = classroom.assignment_cell(found)
waiting = classroom.waiting_to_continue(found) if cell is not None else None
if cell is not None and not projector and not found.closed:
    st.markdown("### Your assignment")
    if waiting is not None:  # its cell waits for it: the notice's button goes on, the Train form would start over
        step, stopped = waiting["restart"]["step"], waiting["assignment"]
        go_on = f"Continue from step {step:,}" if step is not None else "Run it again with the same settings"
        st.markdown(f"Your run of **{escape_markdown(stopped['task'])}** at **n = {stopped['n']}** with seed "
                    f"**{stopped['seed']}** was stopped by a restart of the server: press **{go_on}** at the top of the "
                    "page to go on with it.")
    else:
        st.markdown(f"Train **{escape_markdown(cell['task'])}** at **n = {cell['n']}** with seed **{cell['seed']}** "
                    "(the form arrives filled in; every other setting is the class's).")
        if st.button("Open the Train form with my assignment", key=registry.CLASS_TRAIN, type="primary"):
            classroom.fill_train_form(force=True)
            st.switch_page("pages/train.py")

if classroom.is_instructor(found) and not projector:
    st.markdown("### Instructor")
    store = classroom.store()
    st.markdown("Class link for the students:")
    classroom.show_class_link(found.code)
    if found.assignment is None and not found.closed:
        if st.button("Start the length-scaling assignment", key=registry.CLASS_ASSIGN):
            store.start_assignment(found.code, owner_id.owner(), "length_scaling")
            st.rerun()
    elif found.assignment is not None and not found.ended and st.button(
            "End the assignment", key=registry.CLASS_END,
            help="Nobody is dealt another run; the verdict is decided on the runs that are in."):
        store.end_assignment(found.code, owner_id.owner())
        st.rerun()
    if not found.closed and not found.ended:  # before it starts and while it runs: how the runs fall to the class now
        st.caption(assignments.dealing(assignments.LENGTH_SCALING, len(found.members)) + " "
                   + assignments.describe_short(assignments.LENGTH_SCALING))
    classroom.instructors(found)
    classroom.roster(found.code)
    members = found.member_list()
    folder = store.sweep_folder(found.code)
    for name in ("runs.parquet", "history.parquet"):
        if (folder / name).is_file():
            st.download_button(f"Download the class's {name}", (folder / name).read_bytes(), file_name=name,
                               key=registry.class_key("download", name))
    if members:
        by_id = {m.id: m.name for m in members}
        chosen = st.selectbox("Member", list(by_id), format_func=by_id.get, key=registry.CLASS_MEMBER)
        new_name = st.text_input("New display name", key=registry.CLASS_RENAME, max_chars=40)
        cols = st.columns(2)
        try:
            if cols[0].button("Rename", key=registry.CLASS_RENAME_BUTTON) and new_name:
                store.rename(found.code, owner_id.owner(), chosen, new_name)
                st.rerun()
            sure = cols[1].checkbox(f"Yes, remove {escape_markdown(by_id[chosen])}",  # one box per member: ticked
                                    key=registry.class_key("remove-sure", chosen),  # for one, it is not for the next
                                    help="Their models leave the gallery and their run that is training stops.")
            if cols[1].button("Remove from the class", key=registry.CLASS_REMOVE, disabled=not sure,
                              help="Tick the box above first."):
                store.remove(found.code, owner_id.owner(), chosen, services.job_manager())
                st.rerun()
            if cols[0].button("New rejoin code", key=registry.CLASS_MEMBER_REJOIN,
                              help="For a member who lost theirs (a browser that keeps no cookies was reloaded): typed "
                                   "in the class's join form, it makes a browser this member again. The code before it dies."):
                st.caption(f"Give it to {escape_markdown(by_id[chosen])} privately (shown only now):")
                st.code(store.new_rejoin_code(found.code, owner_id.owner(), chosen), language=None)
        except (ValueError, ClassRefused) as err:
            st.error(quoted(err, 200))
    if found.removed and st.button(f"Let the removed members join again ({len(found.removed)} browser"
                                   f"{'s' if len(found.removed) != 1 else ''})",
                                   key=registry.CLASS_READMIT):
        store.readmit(found.code, owner_id.owner())
        st.rerun()
    cols = st.columns(2)
    if cols[0].button("Reopen the class" if found.closed else "Close the class", key=registry.CLASS_CLOSE):
        store.close(found.code, owner_id.owner(), not found.closed)
        st.rerun()
    sure = cols[1].checkbox("Yes, delete this class", key=registry.class_key("delete", "sure"),
                            help="Its gallery, runs and members are gone; the members' own models stay theirs.")
    if cols[1].button("Delete the class", key=registry.CLASS_DELETE, disabled=not sure,
                      help="Tick the box above first: a deleted class cannot be restored."):
        store.delete(found.code, owner_id.owner())
        registry.enter_class(None)
        st.rerun()
