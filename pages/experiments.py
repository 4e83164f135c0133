"""Experiments: the paper's experiments as sweeps — the shipped results (every scale, and the pre-registered
designs) or a sweep folder of your own — with the claims' one table (`sensviz.findings`)."""

import streamlit as st

from sensviz import findings, results
from sensviz.text import escape_markdown, quoted
from server import services
from ui import cache, page, registry, router
from ui import experiments as drawn
from ui import findings as told

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "Experiments",
    "section": "Results",
    "icon": ":material/science:",
    "settings": {  # its own, under their URL parameters (ui.nav.Setting); options: the results shipped
        "scale": {"label": "Scale", "widget": "selectbox"},
        "experiment": {"label": "Experiment", "widget": "selectbox"},
    },
    "shows": ("the paper's five experiments as figures, from the shipped results or a sweep folder of your "
              "own, with each figure's data as CSV"),
}

st.markdown(
    "The paper's five experiments — **length scaling**, the **norm/blowup trade-off**, **training dynamics**, "
    "the **scratchpad** and **low-sensitivity generalization** — run as declarative sweeps "
    "(`sensviz sweep experiments/<name>.toml --out DIR`), at several scales: **quick** (small models, minutes "
    "each on two CPU cores), **standard** (the same widths with more seeds and lengths, hours on two cores), "
    "**decide** (a pre-registered design: its analysis written into the spec before its first run) and, while "
    "its rows come in, **confirm** (a second pre-registered design, `experiments/running/confirm`). Each claim has "
    "one verdict across all of them (`docs/fidelity.md`): the pre-registered one where a finished design decides "
    "it, else the one of the tables with the most kept runs for it. Every figure keeps the runs that pass the "
    "paper's convergence filter and says how many it dropped; sharpness is on the ±1 scale (×4 for MSE on {0,1} "
    "targets) and error bars are ± one standard error over seeds."
)

settings = page.Settings("experiments")
SHIPPED, FOLDER = "Shipped results", "A sweep folder"
source = st.segmented_control("Results", [SHIPPED, FOLDER], default=SHIPPED, key=registry.EXP_SOURCE,
                              persist_state="session") or SHIPPED
if source == SHIPPED:
    shipped = cache.shipped_results()
    if not shipped:
        st.info("No shipped results on this server. Run a sweep, e.g. "
                "`sensviz sweep experiments/length_scaling.toml --out experiments/results/quick/length_scaling`.")
        st.stop()
    cols = st.columns(2)
    scale = settings.choice("scale", list(shipped), default=results.default_scale(list(shipped)), where=cols[0],
                            help="quick: minutes on two CPU cores; standard: sized to decide each claim (hours); decide: a "
                            "pre-registered design, its analysis written down before it ran")
    name = settings.choice("experiment", list(shipped[scale]), where=cols[1], variant=scale,
                           format_func=lambda k: k.replace("_", " "))
    typed = shipped[scale][name]
else:
    typed = st.text_input("Sweep folder (the --out of `sensviz sweep`, under this server's results folders)",
                          key=registry.EXP_FOLDER, max_chars=services.FOLDER_CHARS, placeholder="e.g. quick/tradeoff",
                          persist_state="session").strip()
    if not typed:
        st.info("Enter the folder a sweep wrote its results to (it holds runs.parquet), relative to this server's "
                "results folders: the shipped results and the sweeps folder of its data directory.")
        st.stop()

try:
    folder = services.sweep_folder(typed)
    runs, history, spec = cache.experiment_results(folder)
except ValueError as err:
    st.error(str(err))
    st.stop()

if runs.empty:
    st.info("This sweep has recorded no run yet: its tables are written after each finished job.")
    st.stop()
finished = int((runs["status"] == "finished").sum())
about = [f"**{escape_markdown(spec.get('experiment'))}**", quoted(spec.get("description") or "", 300),
         f"{len(runs)} runs, {finished} finished, {len(runs) - finished} failed",
         f"spec {quoted(spec['source'])}" if spec.get("source") else None,
         f"scale {quoted(spec['scale'])}" if spec.get("scale") else None]
st.caption(" · ".join(part for part in about if part))
if source == SHIPPED:
    st.subheader("The claims: one verdict each")
    st.caption("Every table that tests a claim, read as one: its verdict stands on the pre-registered design where a "
               "finished one decides it, else on the tables with the most kept runs for it (exploratory where those are "
               "a design's tables tested afterwards); a flat claim judged on tables its margin had seen counts as not "
               f"resolved ({findings.POST_HOC}). The other tables' verdicts are its history; the width, learning rate, "
               "batch, n and steps are those of the runs it stands on.")
    try:
        line, claims = told.experiment_claims(folder)
    except ValueError as err:
        st.warning(quoted(err, 300))
    else:
        st.markdown(line)
        st.dataframe(claims, hide_index=True)
try:
    found = drawn.figures(folder)
except ValueError as err:  # e.g. no run finished yet: the runs and their errors below still show
    st.warning(quoted(err, 300))
    found = []
for fig in found:
    st.subheader(fig["title"])  # the experiment module's own title
    st.markdown(fig["explanation"])  # the experiment module's own prose
    st.caption(escape_markdown(fig["note"]))  # names values from the runs table (a sweep folder's tasks, say)
    st.vega_lite_chart(spec=fig["spec"])  # its Vega-Lite spec, stored: no Altair conversion per view
    page.download(fig["data"], f"{fig['key']}.csv", "Download the data behind this figure (CSV)")

st.subheader("Every run")
left, right = st.columns(2)
with left:
    page.download(runs, "runs.csv", "Download the runs table (CSV)")
with right:
    page.download(history, "history.csv", "Download the per-step history (CSV)")
failed = runs[runs["status"] == "failed"]
if len(failed):
    with st.expander(f"{len(failed)} failed run(s)"):
        st.dataframe(failed[["run_id", "error"]], hide_index=True)
