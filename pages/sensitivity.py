"""Sensitivity: s(f,x) on the Hamming cube for the model and its target, and the Fourier degree profile."""

import streamlit as st

from sensviz import charts
from ui import cache, nav, page

nav.require_router()

selection = page.model()
ref, ck, n = selection.ref, selection.ck, selection.n

with page.progress_bar(f"Evaluating the model on the cube (n={n})…") as report:
    found = cache.sensitivity_tables(ref, n, progress=report)
result = found["report"]
page.exactness_note(result.exact, n, cache.DEFAULT_SAMPLES, 0)
boolean = ck.task is None or ck.task.boolean
st.markdown(
    f"The model is read {'thresholded at its decision boundary (count form of s)' if boolean else 'as a real function (influence form of s)'}; "
    f"as_n(model) = **{result.model.avg_sensitivity:.4f}**"
    + ("" if result.exact else f" ± {result.model.stderr:.4f}")
    + (f", as_n(target) = **{result.target.avg_sensitivity:.4f}**" if result.target is not None else "")
    + f", as_n of the raw output (influence form) = {result.model_real.avg_sensitivity:.4f}."
)

COLOURS = {"model": "s_model", "target": "s_target", "difference": "s_difference", "output": "output_pm1"}
LABELS = {"model": "model", "target": "target", "difference": "model − target", "output": "model output (±1 scale)"}

if "vertices" in found:
    vertices = found["vertices"]
    st.subheader("The cube")
    if n <= cache.GRID_LIMIT:
        options = [c for c in COLOURS if COLOURS[c] in vertices]
        shown = page.choice("colour", "Colour by", options, widget=st.segmented_control, format_func=LABELS.get)
        st.altair_chart(
            charts.cube_grid(vertices, COLOURS[shown], f"{LABELS[shown]} on the 2^{n} inputs",
                             diverging=shown in ("difference", "output")),
            width="content", on_select=page.pick_vertex(n), key=page.chart_key("grid", n),
        )
        st.caption("Rows and columns follow the Gray code, so inputs one bit apart are adjacent (with wrap-around). "
                   "Click a cell to look at that input below.")
    else:
        st.caption(f"n = {n} has {2**n:,} inputs — too many to draw one cell each; see the distributions below.")
    page.download(vertices, "cube_sensitivity.csv", "Download every vertex (CSV)")

    st.subheader("One input")
    vertex = page.number("vertex", f"Vertex (0 … {2**n - 1})", 0, 2**n - 1, 0, variant=n)
    row = vertices.iloc[int(vertex)]
    cols = st.columns(4)
    cols[0].metric("input x", row["bits"])
    cols[1].metric("model output", f"{row['output']:.4f}")
    cols[2].metric("s(model, x)", f"{row['s_model']:.3g}")
    if "s_target" in row:
        cols[3].metric("s(target, x)", f"{row['s_target']:.3g}")
    st.dataframe(cache.flip_table(ref, n, int(vertex)), hide_index=True)

st.subheader("Distributions")
left, right = st.columns(2)
left.altair_chart(charts.histogram(found["histogram"], "histogram of s(f,x)"))
right.altair_chart(charts.lines(found["by_weight"], "weight", "mean_sensitivity", "Hamming weight of x",
                                "mean s(f,x)", "sensitivity by Hamming weight"))
page.download(found["histogram"], "sensitivity_histogram.csv", "Download the histogram (CSV)")
page.download(found["by_weight"], "sensitivity_by_weight.csv", "Download by weight (CSV)")

left, right = st.columns(2)
left.altair_chart(charts.lines(found["influence"], "position", "influence", "position i", "Inf_i",
                               "influence of each position", error=None if result.exact else "stderr"))
page.download(found["influence"], "influence.csv", "Download the influences (CSV)")
if "degrees" in found:
    right.altair_chart(charts.grouped_bars(found["degrees"], "degree", "weight", "degree k", "d_k = Σ λ_P² over |P| = k",
                                           "Fourier degree profile"))
    page.download(found["degrees"], "degree_profile.csv", "Download the degree profile (CSV)")
else:
    right.info("The Fourier degree profile needs the whole cube: choose n within the exact limit.")
