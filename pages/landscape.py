"""Landscape: the paper's sharpness at its radius first; the rho curve, loss slices, Hessian curvature
and the line to a second model on demand."""

import streamlit as st

from sensviz import charts
from ui import cache, nav, page

nav.require_router()

selection = page.model()
ref, ck, n = selection.ref, selection.ck, selection.n
paper_rho = cache.paper_rho(ref)

with st.expander("Measurement settings", expanded=False):
    cols = st.columns(4)
    rho = page.number("rho", "ρ (radius of the perturbation)", 1e-4, 100.0, paper_rho, integer=False,
                      widget=cols[0].number_input, variant=ref.digest[:12], format="%.4g", help=f"default: the paper's radius 0.02·√P = {paper_rho:.4g} (P = "
                      f"{ck.model.n_params():,} parameters without positional encodings)")
    inputs = page.choice("inputs", "Inputs (the cube when it has at most this many)", [64, 128, 256, 512, 1024],
                         default=cache.LANDSCAPE_INPUTS, widget=cols[1].select_slider)
    directions = page.choice("directions", "Random directions", [16, 32, 64, 128, 256], default=64,
                             widget=cols[2].select_slider)
    seed = page.number("seed", "Seed", 0, 2**31 - 1, 0, widget=cols[3].number_input)

st.subheader("Sharpness")
st.markdown("**L_ρ,n = E_x E_{‖Δ‖=ρ} (T_{θ+Δ}(x) − T_θ(x))²**, Δ uniform on the sphere of radius ρ over all "
            "parameters except the positional encodings. The paper measures it at a finite radius; its exact "
            "small-ρ limit (per-example gradients, no random directions) is the first-order part.")
with st.spinner("Perturbing the parameters…"):
    result, exact, count = cache.sharpness(ref, n, rho, directions, inputs, seed)
at_paper = abs(rho - paper_rho) <= 1e-9 * paper_rho
cols = st.columns(3)
cols[0].metric(f"L_ρ at ρ = {rho:.4g}", f"{result.value:.4g}",
               help=f"± {result.stderr:.2g}: one standard error over {directions} directions")
cols[1].metric("± stderr", f"{result.stderr:.2g}")
cols[2].metric("small-ρ limit × ρ²", f"{result.limit * rho**2:.4g}",
               help=f"lim L_ρ/ρ² = E_x‖∇_θT(x)‖²/P = {result.limit:.4g}, exactly, from per-example gradients")
table = cache.sharpness_table(result)
st.altair_chart(charts.sharpness_at_radius(table, f"L_ρ at ρ = {rho:.4g} beside the first-order prediction"))
st.caption(("ρ = 0.02·√P is the paper's radius (the typical size of its proxy's noise). " if at_paper else "")
           + f"Over {'all' if exact else 'a seeded sample of'} {count:,} inputs, {directions} seeded directions "
           f"(seed {seed}). Everything below is computed when you ask for it.")
page.download(table, "sharpness.csv")

st.subheader("How L_ρ/ρ² depends on ρ")
if page.flag("curve", "Sweep ρ from 0.001 to 1 and the paper's radius"):
    with st.spinner("Sweeping ρ…"):
        curve = cache.sharpness_curve(ref, n, min(directions, 64), min(inputs, 256), seed)
    st.altair_chart(charts.sharpness_curve(curve, "L_ρ / ρ² approaches the exact limit as ρ → 0"))
    page.download(curve, "sharpness_curve.csv")

if ck.task is None:
    st.info("Loss slices and curvature need the model's task; upload it with the task named in the sidebar.")
    st.stop()

st.subheader("Loss slices")
if page.flag("slice", "Compute the 1-D slice (41 points)"):
    cols = st.columns(4)
    kind = page.choice("kind", "Directions", ["random", "hessian"], widget=cols[0].radio,
                       format_func={"random": "random", "hessian": "top Hessian eigenvectors"}.get)
    hessian = kind == "hessian"
    normalization = page.choice("norm", "Normalization", ["filter", "layer", "none"], widget=cols[1].radio,
                                disabled=hessian, help="filter: each row scaled to the norm of the weights' row")
    skip = page.flag("skip", "Leave biases and LayerNorm parameters out", widget=cols[2].checkbox, disabled=hessian)
    span = page.choice("span", "Span", [0.1, 0.25, 0.5, 1.0, 2.0], default=1.0, widget=cols[3].select_slider)
    with st.spinner("Evaluating the loss along the direction…"):
        line = cache.loss_slice(ref, n, 1, normalization, skip, hessian, span, 41, min(inputs, 512), seed)
    st.altair_chart(charts.slice_line(line, "1-D slice (α = 0 is the checkpoint)"))
    page.download(line, "slice_1d.csv")
    if page.flag("plane", "Compute the 2-D slice (21 × 21 points)"):
        with st.spinner("Evaluating the loss on the grid…"):
            plane = cache.loss_slice(ref, n, 2, normalization, skip, hessian, span, 21, min(inputs, 256), seed)
            segments = cache.contours(ref, n, normalization, skip, hessian, span, 21, min(inputs, 256), seed)
        st.altair_chart(charts.contour_chart(plane, segments, "2-D slice with contours"))
        page.download(plane, "slice_2d.csv")

st.subheader("Curvature")
if page.flag("hessian", "Compute the top Hessian eigenvalues (Lanczos)"):
    with st.spinner("Lanczos on Hessian-vector products…"), page.guarded("The Hessian's eigenvalues"):
        eigen = cache.hessian_top(ref, n, 3, min(inputs, 512), seed)
        st.dataframe(eigen, hide_index=True)
        st.caption("Top eigenvalues of the Hessian of the training loss over the inputs, with residuals ‖Hv − λv‖.")
        page.download(eigen, "hessian_top.csv")

st.subheader("The line to another model")
if page.flag("line", "Walk the straight line to a second model of the same size"):
    other = page.choose_compare(cache.compatible_models(ref, page.my_models()))
    if other is not None:
        with st.spinner("Walking the straight line between the two…"):
            between = cache.line_between(ref, other, n, min(inputs, 512), seed)
        st.altair_chart(charts.slice_line(between, f"loss from {ref.label} (α = 0) to {other.label} (α = 1)",
                                          x_title="α (0: this model, 1: the other)"))
        page.download(between, "line_between.csv")
