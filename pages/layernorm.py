"""LayerNorm: the factors N_i^(k), their blowup over the cube, and the norm/blowup trade-off; in compare
mode the second model beside the first, on the same colour scale and axes."""

import streamlit as st

from sensviz import charts
from ui import cache, page, router

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "LayerNorm",
    "section": "Explore",
    "icon": ":material/straighten:",
    "needs_model": True,
    "settings": {  # its own, under their URL parameters (ui.nav.Setting)
        "x": {"label": "Choose the input", "widget": "input"},
        "tradeoff": {"label": "Compute for every pretrained checkpoint", "widget": "toggle"},
    },
    "shows": ("the factors N_i^(k) of one input, their Blowup over the cube, Blowup against s(f,x), and the "
              "zoo in the paper's norm/blowup trade-off"),
}

settings = page.Settings("layernorm")
selection = page.model()
models = page.shown()
compare = len(models) > 1
n = selection.n

st.markdown(
    "Each LayerNorm divides its input Y by **N = 1/√(σ²(Y) + ε)** (population variance, the layer's own ε). "
    "Per input, **τ^(k)(x) = max_w (1 + N_w^(k)(x))** and **Blowup(x) = Π_k τ^(k)(x)**."
)

st.subheader("One input")
bits = settings.choose_input(n)
factors = page.labelled({m.label: cache.ln_factor_table(m.ref, bits) for m in models if m.n == n})
st.altair_chart(charts.ln_heatmap(factors, "N_i^(k) for this input (colour on a log scale"
                                  + (", the same for both models)" if compare else ")")))
page.download(factors, "ln_factors.csv")
for m in models:
    if m.n != n:
        st.caption(f"{m.markdown_label} is analysed at n={m.n}, so it does not read this input.")

st.subheader("Over the cube")
found = page.each_model(models, "Tracing every input of {label}…", cache.layernorm_tables)
for m in models:
    summary = found[m.label]["summary"]
    if compare:
        st.markdown(f"**{m.markdown_label}** (n={m.n})")
    if m is models[0] or m.n != n:
        page.exactness_note(summary.exact, m.n, cache.DEFAULT_SAMPLES, 0)
    cols = st.columns(4)
    cols[0].metric("E[Blowup]", page.figure(summary.mean))
    cols[1].metric("E[Blowup²]", page.figure(summary.mean_sq))
    cols[2].metric("max Blowup", page.figure(summary.max))
    cols[3].metric("E[log Blowup]", page.figure(summary.log_mean))


def table(name: str):
    """One of the tables of the models shown, labelled by model in compare mode."""
    return page.labelled({m.label: found[m.label][name] for m in models})


ln_histogram, blowup_histogram, per_ln = table("ln_histogram"), table("blowup_histogram"), table("per_ln")
if compare:  # the two distributions of Blowup overlaid; N per LayerNorm, one panel per model
    st.altair_chart(charts.model_log_histograms(blowup_histogram, "distribution of Blowup(x)"))
    st.altair_chart(charts.log_histogram(ln_histogram, "log10 N_i^(k)", "distribution of N over inputs and positions",
                                         color="ln_name"))
else:
    left, right = st.columns(2)
    left.altair_chart(charts.log_histogram(ln_histogram, "log10 N_i^(k)", "distribution of N over inputs and positions",
                                           color="ln_name"))
    right.altair_chart(charts.log_histogram(blowup_histogram, "log10 Blowup(x)", "distribution of Blowup(x)"))
page.download(ln_histogram, "ln_factor_histogram.csv", "Download the N distribution (CSV)")
page.download(blowup_histogram, "blowup_histogram.csv", "Download the Blowup distribution (CSV)")
st.altair_chart(charts.per_ln_bars(per_ln, "N per LayerNorm: mean and maximum over the inputs"))
page.download(per_ln, "per_ln.csv", "Download per-LayerNorm statistics (CSV)")
with st.expander("The published code's aggregates (compatibility mode)"):
    for m in models:
        authors = found[m.label]["summary"].authors
        st.caption((f"{m.markdown_label}: " if compare else "") + authors["label"])
        st.json({k: v for k, v in authors.items() if k != "label"})

st.subheader("Does the blowup sit where the sensitivity is?")
if all("by_sensitivity" in found[m.label] for m in models):
    by_sensitivity = page.labelled({m.label: found[m.label]["by_sensitivity"] for m in models}, column="function",
                                   models_only=True)
    st.markdown("**Blowup(x) against s(f,x)**: median and 10–90 % range per value"
                + (" (each model's own s)" if compare else " (the model's s and its target's at the same inputs)"))
    st.altair_chart(charts.blowup_by_sensitivity(by_sensitivity))
    page.download(by_sensitivity, "blowup_by_sensitivity.csv")
else:
    st.info(f"Comparing per input needs the whole cube: choose n ≤ {cache.MODEL_EXACT_LIMIT}.")

st.subheader("Across the pretrained checkpoints: the trade-off")
st.markdown("The paper's bound: **C · E[Blowup(x)²] ≥ as_n(f)/√(n log n) − H/n**, C growing with the parameters. "
            "Sensitive tasks need a large norm or a large blowup, more so at larger n.")
if settings.flag("tradeoff"):
    with page.progress_bar("Measuring every pretrained checkpoint…") as report:
        zoo = cache.zoo_tradeoff(progress=report)
    if zoo.empty:
        st.info("No pretrained checkpoints with a Boolean task were found.")
    else:
        left, right = st.columns(2)
        left.altair_chart(charts.tradeoff_scatter(zoo, "parameter norm against log E[Blowup²]"))
        right.altair_chart(charts.bound_by_length(zoo, "the bound's right-hand side"))
        page.download(zoo, "zoo_tradeoff.csv")
