"""Landscape: the paper's sharpness at its radius first; the rho curve, loss slices, Hessian curvature
and the line to a second model on demand. In compare mode both models on the same axes."""

import streamlit as st

from sensviz import charts
from sensviz.lab import gap_words
from sensviz.sharpness import limit_gap
from sensviz.text import escape_markdown
from ui import cache, page, router
from ui.model_refs import ModelRef

router.require_router()

PAGE = {  # read by ui.nav without running this file
    "title": "Landscape",
    "section": "Explore",
    "icon": ":material/landscape:",
    "needs_model": True,
    "settings": {  # its own, under their URL parameters (ui.nav.Setting)
        "rho": {"label": "ρ (radius of the perturbation)", "widget": "number_input", "low": 1e-4, "high": 100.0,
                "integer": False},  # default: the model's paper radius
        "inputs": {"label": "Inputs (the cube when it has at most this many)", "widget": "select_slider",
                   "options": [64, 128, 256, 512, 1024]},  # default: the measurement's (ui.cache, the Lab's too)
        "directions": {"label": "Random directions", "widget": "select_slider",
                       "options": [16, 32, 64, 128, 256]},  # default: as the Lab's (ui.cache)
        "seed": {"label": "Seed", "widget": "number_input", "default": 0, "low": 0, "high": 2147483647},  # 2^31 - 1
        "curve": {"label": "Sweep ρ from 0.001 to 1 and the paper's radius", "widget": "toggle"},
        "change": {"label": "Apply a function-preserving change (random)", "widget": "toggle"},
        "kappa": {"label": "Size: each factor's condition number at most", "widget": "select_slider",
                  "options": [2, 10, 100, 1000], "default": 10},
        "slice": {"label": "Compute the 1-D slice (41 points)", "widget": "toggle"},
        "kind": {"label": "Directions", "widget": "radio", "options": ["random", "hessian"]},
        "norm": {"label": "Normalization", "widget": "radio", "options": ["filter", "layer", "none"]},
        "skip": {"label": "Skip biases and LayerNorms", "widget": "checkbox"},
        "span": {"label": "Span", "widget": "select_slider", "options": [0.1, 0.25, 0.5, 1.0, 2.0], "default": 1.0},
        "plane": {"label": "Compute the 2-D slice (21 × 21 points)", "widget": "toggle"},
        "hessian": {"label": "Compute the top Hessian eigenvalues (Lanczos)", "widget": "toggle"},
        "line": {"label": "Walk the straight line to a second model of the same size", "widget": "toggle"},
        "proxy": {"label": "Compute the paper's sharpness proxy (Gaussian noise on every parameter)",
                  "widget": "toggle"},
    },
    "shows": ("sharpness L_ρ at the paper's radius with its error bar beside the exact small-ρ limit; on "
              "demand the ρ curve, the paper's sharpness proxy, 1-D and 2-D loss slices, Hessian eigenvalues and the "
              "line to a second model"),
}

settings = page.Settings("landscape")
selection = page.model()
models = page.shown()
compare = len(models) > 1
ref, ck, n = selection.ref, selection.ck, selection.n
paper_rho = cache.paper_rho(ref)

with st.expander("Measurement settings", expanded=False):
    cols = st.columns(4)
    rho = settings.number("rho", default=paper_rho, where=cols[0], variant=ref.digest[:12], format="%.4g",
                          help=f"default: the paper's radius 0.02·√P = {paper_rho:.4g} (P = {ck.model.n_params():,} "
                          "parameters without positional encodings)")
    inputs = settings.choice("inputs", default=cache.LANDSCAPE_INPUTS, where=cols[1])
    directions = settings.choice("directions", default=cache.LANDSCAPE_DIRECTIONS, where=cols[2])
    seed = settings.number("seed", where=cols[3])
at_paper = abs(rho - paper_rho) <= 1e-9 * paper_rho


def radius(model: ModelRef) -> float:
    """The radius a model is measured at: its own paper radius 0.02·√P by default, else the radius chosen."""
    return cache.paper_rho(model) if at_paper else rho


def on_task(shown: list[page.Shown]) -> str:
    """Which task the losses are on, for the charts' titles."""
    tasks = [f"{cache.model_facts(m.ref)['task'].upper()} inputs, n={m.n}" for m in shown]
    return tasks[0] if len(set(tasks)) == 1 else f"each model's own task ({'; '.join(tasks)})"


st.subheader("Sharpness")
st.markdown("**L_ρ,n = E_x E_{‖Δ‖=ρ} (T_{θ+Δ}(x) − T_θ(x))²**, Δ uniform on the sphere of radius ρ over all "
            "parameters except the positional encodings. The paper measures it at a finite radius; its exact "
            "small-ρ limit (per-example gradients, no random directions) is the first-order part.")
results = page.each_model(models, "Perturbing the parameters of {label}…", lambda ref, n: cache.sharpness(
    ref, n, radius(ref), directions, inputs, seed), progress=False)
for m in models:
    result, exact, count = results[m.label]
    if compare:
        st.markdown(f"**{m.markdown_label}** (n={m.n})")
    cols = st.columns(3)
    cols[0].metric(f"L_ρ at ρ = {radius(m.ref):.4g}", page.figure(result.value),
                   help=f"± {result.stderr:.2g}: one standard error over {directions} directions")
    cols[1].metric("± stderr", page.figure(result.stderr, 2))
    first_order = None if result.limit is None else result.limit * radius(m.ref) ** 2
    cols[2].metric("small-ρ limit × ρ²", page.figure(first_order),
                   help=f"lim L_ρ/ρ² = E_x‖∇_θT(x)‖²/P = {page.figure(result.limit)}, exactly, from per-example "
                   "gradients: the first-order part of the sharpness")
table = page.labelled({m.label: cache.sharpness_table(results[m.label][0]) for m in models})
same_radius = len({round(radius(m.ref), 12) for m in models}) == 1
title = f"L_ρ at ρ = {rho:.4g}" if same_radius else "L_ρ at each model's radius 0.02·√P"
st.altair_chart(charts.sharpness_at_radius(table, f"{title} beside the first-order prediction"))
_, exact, count = results[models[0].label]
st.caption(("ρ = 0.02·√P is the paper's radius (the typical size of its proxy's noise). " if at_paper else "")
           + f"Over {'all' if exact else 'a seeded sample of'} {count:,} inputs, {directions} seeded directions "
           f"(seed {seed}). Everything below is computed when you ask for it.")
page.download(table, "sharpness.csv")

st.subheader("How L_ρ/ρ² depends on ρ")
if settings.flag("curve"):
    drawn = min(directions, 64)
    curves = page.each_model(models, "Sweeping ρ for {label}…", lambda ref, n: cache.sharpness_curve(
        ref, n, drawn, min(inputs, 256), seed), progress=False)
    curve = page.labelled(curves)
    st.altair_chart(charts.radius_curves(curve, [cache.paper_rho(m.ref) for m in models],
                                         "L_ρ / ρ² against ρ; dashed: its exact limit as ρ → 0"))
    st.caption(f"±1 standard error over {drawn} seeded directions; grey: the paper's radius 0.02·√P. "
               + gap_words({escape_markdown(label): limit_gap(c) for label, c in curves.items()}, drawn))
    page.download(curve, "sharpness_curve.csv")

st.subheader("A function-preserving change")
if settings.flag("change"):
    kappa = settings.choice("kappa")
    if ck.model.arch not in ("encoder", "scratchpad"):
        st.info("The function-preserving maps are implemented for the encoder and the scratchpad only.")
    else:
        with page.guarded("The function-preserving change"), st.spinner("Changing the model and measuring both…"):
            changed, largest = cache.symmetry_change(ref, n, float(kappa), radius(ref), directions, min(inputs, 256), seed)
            st.dataframe(changed, hide_index=True)
            st.caption(f"{escape_markdown(ref.label)} and a copy changed by every exact map of `sensviz.symmetries` "
                       "at once (per head "
                       "W_Q → AᵀW_Q, W_K → A⁻¹W_K, W_V → BᵀW_V, W_O → W_O B⁻ᵀ; each ReLU unit rescaled; the last "
                       f"LayerNorm against the head; biases before a LayerNorm shifted), each factor of condition "
                       f"number ≤ {kappa}, seed {seed}, the same directions for both. The outputs' largest change: "
                       f"{largest:.3g}. An after / before of 1 is a measure this change leaves alone; the "
                       "symmetry-aware sharpness is the least L_ρ over the orbit from its minimum-norm point.")
            page.download(changed, "function_preserving_change.csv")

if ck.task is None:
    st.info("Loss slices and curvature need the model's task; upload it with the task named in the sidebar.")
    st.stop()
tasked = [m for m in models if cache.model_facts(m.ref)["task"]]

st.subheader("The paper's sharpness proxy")
if settings.flag("proxy"):
    proxies = page.each_model(tasked, "Adding Gaussian noise to {label}…",
                              lambda ref, n: cache.proxy(ref, n, inputs, seed), progress=False)
    for m in tasked:
        found, factor = proxies[m.label]
        if compare:
            st.markdown(f"**{m.markdown_label}** (n={m.n})")
        cols = st.columns(3)
        cols[0].metric("E[L(θ+Δ) − L(θ)]", page.figure(found.value),
                       help=f"± {found.stderr:.2g}: one standard error over {found.n_draws} noise draws")
        cols[1].metric("± stderr", page.figure(found.stderr, 2))
        cols[2].metric("on the ±1 scale (×4)" if factor != 1 else "on the ±1 scale", page.figure(factor * found.value),
                       help="what the paper's length-scaling and trade-off plots show: a model trained on 0/1 targets "
                       "times 4" if factor != 1 else "this model's targets are already on the ±1 scale")
    found = proxies[tasked[0].label][0]
    st.caption(f"The paper's own measurement: the loss's mean rise under Gaussian noise of ε = {found.eps:g} per "
               f"parameter (its typical length ε·√P is the paper's radius), over {found.n_draws} seeded draws (seed "
               f"{seed}). L_ρ above measures the outputs' change instead, under a random step of fixed length ρ.")

st.subheader("Loss slices")
if settings.flag("slice"):
    cols = st.columns(2)
    kind = settings.choice("kind", where=cols[0], format_func={"random": "random", "hessian": "top Hessian eigenvectors"}.get)
    hessian = kind == "hessian"
    normalization = settings.choice("norm", where=cols[1], disabled=hessian,
                                    help="filter: each row scaled to the norm of the weights' row")
    cols = st.columns(2)
    skip = settings.flag("skip", where=cols[0], disabled=hessian,
                         help="Leave the biases and the LayerNorm parameters out of the random directions")
    span = settings.choice("span", where=cols[1])
    line = page.labelled(page.each_model(tasked, "Evaluating the loss of {label} along the direction…",
                                         lambda ref, n: cache.loss_slice(ref, n, 1, normalization, skip, hessian, span,
                                                                         41, min(inputs, 512), seed), progress=False))
    st.altair_chart(charts.slice_line(line, "1-D slice (α = 0 is the checkpoint)", task=on_task(tasked)))
    page.download(line, "slice_1d.csv")
    if settings.flag("plane"):
        planes = page.each_model(tasked, "Evaluating the loss of {label} on the grid…", lambda ref, n: cache.loss_slice(
            ref, n, 2, normalization, skip, hessian, span, 21, min(inputs, 256), seed), progress=False)
        segments = page.each_model(tasked, "Drawing the contours of {label}…", lambda ref, n: cache.contours(
            ref, n, normalization, skip, hessian, span, 21, min(inputs, 256), seed), progress=False)
        plane = page.labelled(planes)
        st.altair_chart(charts.contour_chart(plane, page.labelled(segments),
                                             f"2-D slice with contours, loss on {on_task(tasked)}"))
        page.download(plane, "slice_2d.csv")

st.subheader("Curvature")
if settings.flag("hessian"):
    with page.guarded("The Hessian's eigenvalues"):
        eigen = page.labelled(page.each_model(tasked, "Lanczos on Hessian-vector products of {label}…",
                                              lambda ref, n: cache.hessian_top(ref, n, 3, min(inputs, 512), seed),
                                              progress=False))
        st.dataframe(eigen, hide_index=True)
        st.caption("Top eigenvalues of the Hessian of the training loss over the inputs, with residuals ‖Hv − λv‖.")
        page.download(eigen, "hessian_top.csv")

st.subheader("The line to another model")
if settings.flag("line"):
    other = settings.choose_compare(cache.compatible_models(ref, page.my_models()))
    if other is not None:
        with st.spinner("Walking the straight line between the two…"):
            between = cache.line_between(ref, other, n, min(inputs, 512), seed)
        st.altair_chart(charts.slice_line(between, f"from {ref.label} (α = 0) to {other.label} (α = 1)",
                                          x_title="α (0: this model, 1: the other)", task=on_task(models[:1])))
        page.download(between, "line_between.csv")
