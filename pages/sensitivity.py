"""Sensitivity: s(f,x) on the Hamming cube for the model and its target, and the Fourier degree profile;
in compare mode the second model beside the first, on the same colour scale and axes."""

import streamlit as st

from sensviz import charts
from ui import cache, page, router

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "Sensitivity",
    "section": "Explore",
    "icon": ":material/grid_on:",
    "needs_model": True,
    "settings": {  # its own, under their URL parameters (ui.nav.Setting)
        "colour": {"label": "Colour by", "widget": "segmented_control"},  # options: the colourings both models have
        "vertex": {"label": "Vertex", "widget": "number_input", "default": 0, "low": 0},  # high: 2^n - 1
    },
    "shows": ("s(f,x) on every vertex of the Hamming cube, model vs. target; one vertex and its flips; "
              "distributions, influences and the Fourier degree profile"),
}

settings = page.Settings("sensitivity")
selection = page.model()
models = page.shown()
compare = len(models) > 1
found = page.each_model(models, "Evaluating {label} on the cube (n={n})…", cache.sensitivity_tables)
for m in models:
    result = found[m.label]["report"]
    facts = cache.model_facts(m.ref)
    reading = ("thresholded at its decision boundary (count form of s)" if facts["boolean"]
               else "as a real function (influence form of s)")
    target = f", as_n(target) = **{result.target.avg_sensitivity:.4f}**" if result.target is not None else ""
    st.markdown(f"{f'**{m.markdown_label}** (n={m.n}) is read' if compare else 'The model is read'} {reading}; "
                f"as_n(model) = **{result.model.avg_sensitivity:.4f}**"
                + ("" if result.exact else f" ± {result.model.stderr:.4f}")
                + f"{target}, as_n of the raw output (influence form) = {result.model_real.avg_sensitivity:.4f}.")
    if m is models[0] or m.n != models[0].n:
        page.exactness_note(result.exact, m.n, cache.DEFAULT_SAMPLES, 0)

COLOURS = {"model": "s_model", "target": "s_target", "difference": "s_difference", "output": "output_pm1"}
LABELS = {"model": "model", "target": "target", "difference": "model − target", "output": "model output (±1 scale)"}
vertices = {m.label: found[m.label]["vertices"] for m in models if "vertices" in found[m.label]}
n = selection.n
top = max(m.n for m in models)

if len(vertices) == len(models):
    st.subheader("The cube")
    if top <= cache.GRID_LIMIT:
        options = [c for c in COLOURS if all(COLOURS[c] in v for v in vertices.values())]
        shown = settings.choice("colour", options, format_func=LABELS.get)
        st.vega_lite_chart(
            spec=cache.spec(charts.cube_grids, vertices, COLOURS[shown], top,
                            title=f"{charts.CUBE_COLOURINGS[COLOURS[shown]]} on every input"),
            width="content", on_select=settings.pick_vertex(n), key=settings.chart_key("grid", n),
        )
        st.caption(f"One cell per input, labelled by its bits; rows and columns follow the Gray code, so inputs one "
                   f"bit apart are adjacent (with wrap-around). Colours on {charts.cube_scale_words(COLOURS[shown], top)}"
                   + (", the same for both models" if compare else "")
                   + "; a white dot marks an input where the target is 1. Click a cell to look at that input below.")
    else:
        st.caption(f"n = {top} has {2**top:,} inputs — too many to draw one cell each; see the distributions below.")
    page.download(page.labelled(vertices), "cube_sensitivity.csv", "Download every vertex (CSV)")

    st.subheader("One input")
    vertex = settings.number("vertex", high=2**n - 1, label=f"Vertex (0 … {2**n - 1})", variant=n)
    for m in models:
        if m.n != n:
            st.caption(f"{m.markdown_label} is analysed at n={m.n}: this input is not one of its inputs.")
            continue
        row = vertices[m.label].iloc[int(vertex)]
        if compare:
            st.markdown(f"**{m.markdown_label}**")
        st.metric("input x", row["bits"])  # on a row of its own: every bit shown
        cols = st.columns(3)
        cols[0].metric("model output", f"{row['output']:.4f}")
        cols[1].metric("s(model, x)", f"{row['s_model']:.3g}")
        if "s_target" in row:
            cols[2].metric("s(target, x)", f"{row['s_target']:.3g}")
        st.dataframe(cache.flip_table(m.ref, m.n, int(vertex)), hide_index=True)
else:
    st.caption(f"The cube and single inputs need the whole cube of every model shown: choose n ≤ "
               f"{cache.MODEL_EXACT_LIMIT}.")


def table(name: str):
    """One of the tables of the models shown: one model's function and its target, or each model's own rows."""
    return page.labelled({m.label: found[m.label][name] for m in models}, models_only=True)


st.subheader("Distributions")
if compare:
    st.caption("Each model's own function, on the same axes; the targets are on the page of each model alone.")
histogram, by_weight, influence = table("histogram"), table("by_weight"), table("influence")
exact = all(found[m.label]["report"].exact for m in models)
degrees = table("degrees") if all("degrees" in found[m.label] for m in models) else None
# one model: two charts a row; two models: one chart a row, wide enough for both
places = [st.container() for _ in range(4)] if compare else [*st.columns(2), *st.columns(2)]
# every chart as a spec converted once per content (cache.spec), not per view
places[0].vega_lite_chart(spec=cache.spec(charts.histogram, histogram, "histogram of s(f,x)"))
places[1].vega_lite_chart(spec=cache.spec(charts.lines, by_weight, "weight", "mean_sensitivity", "Hamming weight of x",
                                          "mean s(f,x)", "sensitivity by Hamming weight"))
places[2].vega_lite_chart(spec=cache.spec(charts.lines, influence, "position", "influence", "position i", "Inf_i",
                                          "influence of each position", error=None if exact else "stderr"))
if degrees is not None:
    places[3].vega_lite_chart(spec=cache.spec(charts.degree_profiles, degrees, "Fourier degree profile"))
else:
    places[3].info("The Fourier degree profile needs the whole cube: choose n within the exact limit.")
page.download(histogram, "sensitivity_histogram.csv", "Download the histogram (CSV)")
page.download(by_weight, "sensitivity_by_weight.csv", "Download by weight (CSV)")
page.download(influence, "influence.csv", "Download the influences (CSV)")
if degrees is not None:
    page.download(degrees, "degree_profile.csv", "Download the degree profile (CSV)")
