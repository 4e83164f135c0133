"""Before training: what random initialisations of an architecture compute on the cube, at three init
scales, beside the target, with the claim that they compute low-sensitivity functions and its verdict."""

import streamlit as st

from sensviz import charts, init_charts, init_claim
from sensviz.init_study import INIT_SCALES
from ui import cache, init_path, job_panel, page, registry, router

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "Before training",
    "section": "Explore",
    "icon": ":material/casino:",
    "settings": {  # its own, under their URL parameters (ui.nav.Setting)
        "arch": {"label": "Architecture", "widget": "segmented_control", "options": ["encoder", "formal"]},
        "d": {"label": "Width d", "widget": "selectbox", "options": [8, 16, 32, 64], "default": 32},
        "layers": {"label": "Layers", "widget": "selectbox", "options": [1, 2, 3, 4], "default": 2},
        "length": {"label": "Input length n", "widget": "select_slider", "options": [4, 5, 6, 7, 8, 9, 10],
                   "default": 8},
        "inits": {"label": "Initialisations", "widget": "selectbox", "options": [32, 64, 128, 256], "default": 64},
        "target": {"label": "Target", "widget": "selectbox", "options": ["parity", "majority", "first"]},
        "path": {"label": "Where training goes: train the first initialisation on the target (n ≤ 8)",
                 "widget": "toggle"},
        "steps": {"label": "Training steps", "widget": "select_slider", "options": [100, 200, 500, 1000],
                  "default": 500},
    },
    "shows": ("what random initialisations compute on the cube: the spread of as_n, the Fourier degree profile and "
              "attention entropy at three init scales, beside the target, the low-sensitivity claim's verdict, and, on "
              "demand, where training takes one of them (a server job followed in the sidebar)"),
}

TRACE_PAGE_N = 8  # the server's job trains on all 2^n strings each step: at most 2^8 here

settings = page.Settings("init")
st.markdown("Is PARITY hard because training cannot find it, or because the architecture starts far from it? "
            "Each initialisation's output T(x) on every input is read as the Boolean function "
            "f(x) = sign(T(x) − median T): its sensitivity does not depend on the output's scale.")
left, middle, right = st.columns(3)
arch = settings.choice("arch", where=left)
d_model = settings.choice("d", where=left)
n_layers = settings.choice("layers", where=middle)
n = settings.choice("length", where=middle)
inits = settings.choice("inits", where=right)
task = settings.choice("target", where=right, format_func=str.upper)

with st.spinner(f"Evaluating {inits} initialisations at {len(INIT_SCALES)} init scales on all {2**n} inputs…"):
    found = cache.init_study_tables(arch, d_model, n_layers, n, inits, task)

st.subheader("Average sensitivity of each initialisation")
st.altair_chart(init_charts.distribution_chart(found["table"], n, found["target"]))
page.download(found["table"], "init_study.csv")
st.subheader("Fourier degree profile: the mean over initialisations and the target")
st.altair_chart(charts.degree_profiles(found["profiles"]))
page.download(found["profiles"], "init_degree_profiles.csv", "Download the profiles (CSV)")

st.subheader("The claim")
claim = found["claim"]
st.markdown(f"*{init_claim.CLAIM}*")
st.metric("verdict", claim["verdict"])
st.caption(f"Rule: {init_claim.RULE}.")
st.dataframe(found["cells"], hide_index=True)

st.subheader("Where training goes")


def draw_path(job_id: str, every: int) -> None:
    """The job's path so far over the study's starting band, and its table as a download."""
    traced = init_path.records(job_id)
    if not traced:
        st.caption("The first measurement is on its way…")
        return
    study = cache.init_band_study(arch, d_model, n_layers, n, inits, task)
    for quantity in ("avg_sensitivity", "attention_entropy"):
        st.altair_chart(init_charts.path_chart(study, traced, quantity))
    st.caption(f"Grey: the middle 90 % of the {inits} initialisations at init scale 1 (dashed: their median), drawn "
               "across the steps as the starting band; red: the target; blue: initialisation 0 (the study's first, "
               f"seed 0) trained by the server on all {2**n} strings each step (AdamW, lr 5e-3), measured every "
               f"{every} steps while measuring takes less time than training. Its step 0 is its "
               "value in the study.")
    page.download(init_charts.path_table(traced), "init_training_path.csv", "Download the path (CSV)")


@st.fragment(run_every=1.5)
def live(job_id: str, every: int) -> None:
    """Progress, Stop and the path so far, while the job is queued or runs."""
    status = init_path.status(job_id)
    if status is None or not status.active:
        st.rerun()
    job_panel.show_progress(status, key=registry.INIT_STOP)
    draw_path(job_id, every)


if settings.flag("path"):
    steps = settings.choice("steps")
    if n > TRACE_PAGE_N:
        st.info(f"Training is traced here for n ≤ {TRACE_PAGE_N} (the whole cube every step); "
                "`sensviz.init_training.training_path` takes n up to 10.")
    else:
        wanted = init_path.request(arch, d_model, n_layers, n, task, steps)
        status = init_path.followed(wanted)
        if status is None:
            st.caption(f"The server trains initialisation 0 on {task.upper()} for {steps} steps as a queued job (one "
                       "run per user; the sidebar follows it on every page, and its model becomes the selected one).")
            st.button("Train initialisation 0 on the server", key=registry.INIT_TRAIN, type="primary",
                      on_click=init_path.submit, args=(wanted,))
            refused = init_path.refusal()
            if refused:
                st.error(refused)
        elif status.active:
            live(status.id, wanted.measure_every)
        else:
            job_panel.show_outcome(status)
            draw_path(status.id, wanted.measure_every)
