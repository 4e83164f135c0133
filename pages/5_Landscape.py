"""Landscape: sharpness with error bars, loss slices, Hessian curvature, two checkpoints compared."""

import streamlit as st

from ui import charts, page, state

selection = page.setup("Landscape", icon="⛰️")
if selection is None:
    st.stop()
ref, ck, n = selection.ref, selection.ck, selection.n

with st.expander("Measurement settings", expanded=False):
    cols = st.columns(3)
    inputs = cols[0].select_slider("Inputs (the cube when it has at most this many)", [64, 128, 256, 512, 1024],
                                   value=state.LANDSCAPE_INPUTS, key="sv_w_land_inputs")
    directions = cols[1].select_slider("Random directions", [16, 32, 64, 128, 256], value=64, key="sv_w_land_dirs")
    seed = cols[2].number_input("Seed", 0, 2**31 - 1, 0, key="sv_w_land_seed")

st.subheader("Sharpness")
st.markdown("**L_ρ,n = E_x E_{‖Δ‖=ρ} (T_{θ+Δ}(x) − T_θ(x))²**, Δ uniform on the sphere of radius ρ over all "
            "parameters except the positional encodings.")
rho = st.select_slider("ρ", [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0], value=0.01, key="sv_w_land_rho")
with st.spinner("Perturbing the parameters…"):
    result, exact, count = state.sharpness(ref, ck, n, rho, directions, inputs, int(seed))
cols = st.columns(3)
cols[0].metric("L_ρ", f"{result.value:.4g}", help=f"± {result.stderr:.2g} (one standard error over {directions} directions)")
cols[1].metric("± stderr", f"{result.stderr:.2g}")
cols[2].metric("exact limit × ρ²", f"{result.limit * rho**2:.4g}", help="lim L_ρ/ρ² = E_x‖∇_θT(x)‖²/P, from per-example gradients")
st.caption(f"Over {'all' if exact else 'a seeded sample of'} {count:,} inputs, {directions} seeded directions (seed {seed}).")

with st.spinner("Sweeping ρ…"):
    curve = state.sharpness_curve(ref, ck, n, min(directions, 64), min(inputs, 256), int(seed))
st.altair_chart(charts.sharpness_curve(curve, "L_ρ / ρ² approaches the exact limit as ρ → 0"))
page.download(curve, "sharpness_curve.csv")

if ck.task is None:
    st.info("Loss slices and curvature need the model's task; upload it with the task named in the sidebar.")
    st.stop()

st.subheader("Loss slices")
cols = st.columns(4)
kind = cols[0].radio("Directions", ["random", "top Hessian eigenvectors"], key="sv_w_land_kind")
normalization = cols[1].radio("Normalization", ["filter", "layer", "none"], key="sv_w_land_norm",
                              disabled=kind != "random", help="filter: each row scaled to the norm of the weights' row")
skip = cols[2].checkbox("Leave biases and LayerNorm parameters out", key="sv_w_land_skip", disabled=kind != "random")
span = cols[3].select_slider("Span", [0.1, 0.25, 0.5, 1.0, 2.0], value=1.0, key="sv_w_land_span")
hessian = kind != "random"
with st.spinner("Evaluating the loss along the direction…"):
    line = state.loss_slice(ref, ck, n, 1, normalization, skip, hessian, span, 41, min(inputs, 512), int(seed))
st.altair_chart(charts.slice_line(line, "1-D slice (α = 0 is the checkpoint)"))
page.download(line, "slice_1d.csv")
if st.toggle("Compute the 2-D slice (21 × 21 points)", key="sv_w_land_2d"):
    with st.spinner("Evaluating the loss on the grid…"):
        plane = state.loss_slice(ref, ck, n, 2, normalization, skip, hessian, span, 21, min(inputs, 256), int(seed))
    st.altair_chart(charts.contour_chart(plane, state.contours(plane), "2-D slice with contours"))
    page.download(plane, "slice_2d.csv")

st.subheader("Curvature")
with st.spinner("Lanczos on Hessian-vector products…"):
    eigen = state.hessian_top(ref, ck, n, 3, min(inputs, 512), int(seed))
st.dataframe(eigen, hide_index=True)
st.caption("Top eigenvalues of the Hessian of the training loss over the inputs, with residuals ‖Hv − λv‖.")
page.download(eigen, "hessian_top.csv")

st.subheader("Compare with another checkpoint")
others = state.compatible_refs(ref, ck)
if not others:
    st.info("No other model with the same architecture and size is available (pretrained or trained here).")
else:
    other = st.selectbox("Second checkpoint", others, format_func=lambda r: r.label, key="sv_w_land_other")
    other_ck = state.load(other)
    with st.spinner("Walking the straight line between the two…"):
        between = state.line_between(ref, ck, other, other_ck, n, min(inputs, 512), int(seed))
    st.altair_chart(charts.slice_line(between, f"loss from {ref.name} (α = 0) to {other.name} (α = 1)",
                                      x_title="α (0: this checkpoint, 1: the other)"))
    page.download(between, "line_between.csv")
