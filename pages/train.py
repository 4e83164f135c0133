"""Train: a small transformer trained by the server (its own process, queued behind a cap), with
the paper's measurements streamed in while it learns."""

import streamlit as st

from sensviz import charts
from sensviz.text import escape_markdown, quoted
from server import jobs, services
from ui import cache, classroom, job_panel, page, registry, router, train_form

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "Train",
    "section": "Explore",
    "icon": ":material/model_training:",
    "settings": {  # its own, under their URL parameters (ui.nav.Setting)
        "logloss": {"label": "Loss on a log axis", "widget": "toggle"},
    },
    "shows": ("train a small transformer on PARITY, MAJORITY, FIRST, MEAN, sparse or random functions, as a "
              "server-side job that keeps running while you look at other pages; live loss, accuracy, "
              "sharpness, Blowup, param_norm, as_n and the Fourier degree profile; presets and early stopping"),
}

settings = page.Settings("train")
st.markdown("Train a transformer on fresh uniform bit strings every step (AdamW, the paper's setup), measuring "
            "loss, accuracy, sharpness, LayerNorm blowup and the parameter norm as it learns. The run belongs to "
            "the server: it goes on while you look at other pages (the sidebar shows it), and the finished model "
            "becomes the selected one.")

cell = classroom.fill_train_form()
if cell is not None:
    st.info(f"Your class assignment is filled in: {escape_markdown(cell['task'])}, n = {cell['n']}, seed {cell['seed']}.")
try:
    request = train_form.form(note=classroom.assignment_note)
    job_id = job_panel.submit(request) if request is not None else None
    if job_id is not None:
        classroom.job_started(job_id, request)
except (jobs.JobRefused, ValueError) as err:
    st.error(f"Cannot train with these settings: {quoted(err, 300)}")
else:
    if job_id is not None:
        registry.follow_job(job_id)
        st.rerun()


def show_records(status: jobs.JobStatus, log_loss: bool):
    records = services.job_manager().records(status.id)
    if not records:
        if status.active:  # an ended run without one says how it ended above
            st.caption("The first measurement is on its way…")
        return
    history, degrees = cache.training_tables(records)
    marks = {}
    if status.continued_from is not None:
        marks[status.continued_from] = "the server restarted; the run went on from here"
        st.caption(f"The server restarted during this run: it went on from step {status.continued_from:,} (the dashed "
                   "line), from a snapshot of that step, exactly as it would have gone on without the restart.")
    st.altair_chart(charts.training_curves(history, "measurements during training", log_loss=log_loss, marks=marks))
    if not degrees.empty:
        st.altair_chart(charts.degree_history(degrees, "Fourier degree profile of the model: which degrees are learned when"))
    return history


@st.fragment(run_every=1.5)
def live(job_id: str, log_loss: bool) -> None:
    status = services.job_manager().status(job_id)
    if status is None or not status.active:
        st.rerun()
    job_panel.show_progress(status, key=registry.TRAIN_STOP)
    show_records(status, log_loss)


job_id = registry.followed_job() or job_panel.job_of_selected()  # after a reload: the run of the selected model
status = services.job_manager().status(job_id) if job_id else None
if status is not None:
    st.subheader(escape_markdown(status.name))
    log_loss = settings.flag("logloss", help="The loss falls over orders of magnitude: a log axis shows its late "
                             "steps too.")
    if status.active:
        live(job_id, log_loss)
    else:
        job_panel.show_outcome(status)
        history = show_records(status, log_loss)
        if history is not None:
            page.download(history, "training_measurements.csv")
