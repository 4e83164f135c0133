"""LayerNorm: the factors N_i^(k), their blowup over the cube, and the norm/blowup trade-off."""

import streamlit as st

from sensviz import charts
from ui import cache, nav, page

nav.require_router()

selection = page.model()
ref, n = selection.ref, selection.n

st.markdown(
    "Each LayerNorm divides its input Y by **N = 1/√(σ²(Y) + ε)** (population variance, the layer's own ε). "
    "Per input, **τ^(k)(x) = max_w (1 + N_w^(k)(x))** and **Blowup(x) = Π_k τ^(k)(x)**."
)

st.subheader("One input")
bits = page.choose_input(n)
factors = cache.ln_factor_table(ref, bits)
st.altair_chart(charts.ln_heatmap(factors, "N_i^(k) for this input (colour on a log scale)"))
page.download(factors, "ln_factors.csv")

st.subheader("Over the cube")
with page.progress_bar("Tracing every input…") as report:
    found = cache.layernorm_tables(ref, n, progress=report)
summary = found["summary"]
page.exactness_note(summary.exact, n, cache.DEFAULT_SAMPLES, 0)
cols = st.columns(4)
cols[0].metric("E[Blowup]", f"{summary.mean:.4g}")
cols[1].metric("E[Blowup²]", f"{summary.mean_sq:.4g}")
cols[2].metric("max Blowup", f"{summary.max:.4g}")
cols[3].metric("E[log Blowup]", f"{summary.log_mean:.4g}")
left, right = st.columns(2)
left.altair_chart(charts.log_histogram(found["ln_histogram"], "log10 N_i^(k)", "distribution of N over inputs and positions",
                                       color="ln_name"))
right.altair_chart(charts.log_histogram(found["blowup_histogram"], "log10 Blowup(x)", "distribution of Blowup(x)"))
page.download(found["ln_histogram"], "ln_factor_histogram.csv", "Download the N distribution (CSV)")
page.download(found["blowup_histogram"], "blowup_histogram.csv", "Download the Blowup distribution (CSV)")
st.altair_chart(charts.per_ln_bars(found["per_ln"], "N per LayerNorm: mean and maximum over the inputs"))
page.download(found["per_ln"], "per_ln.csv", "Download per-LayerNorm statistics (CSV)")
with st.expander("The published code's aggregates (compatibility mode)"):
    st.caption(summary.authors["label"])
    st.json({k: v for k, v in summary.authors.items() if k != "label"})

st.subheader("Does the blowup sit where the sensitivity is?")
if "by_sensitivity" in found:
    st.markdown("**Blowup(x) against s(f,x)**: median and 10–90 % range per value")
    st.altair_chart(charts.blowup_by_sensitivity(found["by_sensitivity"]))
    page.download(found["by_sensitivity"], "blowup_by_sensitivity.csv")
else:
    st.info(f"Comparing per input needs the whole cube: choose n ≤ {cache.MODEL_EXACT_LIMIT}.")

st.subheader("Across the pretrained checkpoints: the trade-off")
st.markdown("The paper's bound: **C · E[Blowup(x)²] ≥ as_n(f)/√(n log n) − H/n**, C growing with the parameters. "
            "Sensitive tasks need a large norm or a large blowup, more so at larger n.")
if page.flag("tradeoff", "Compute for every pretrained checkpoint"):
    with page.progress_bar("Measuring every pretrained checkpoint…") as report:
        zoo = cache.zoo_tradeoff(progress=report)
    if zoo.empty:
        st.info("No pretrained checkpoints with a Boolean task were found.")
    else:
        left, right = st.columns(2)
        left.altair_chart(charts.tradeoff_scatter(zoo, "parameter norm against log E[Blowup²]"))
        right.altair_chart(charts.bound_by_length(zoo, "the bound's right-hand side"))
        page.download(zoo, "zoo_tradeoff.csv")
