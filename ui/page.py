"""What every page shares: page setup, the model-selection sidebar, progress bars and downloads.

`setup(title)` configures the page, draws the sidebar (choose a zoo checkpoint, an upload or a
model trained in this session; the selected model's summary) and returns the `Selection`, or
None when no model is selected yet. The selection lives in session state (`ui.state.SELECTED`), so
it survives page switches.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import pandas as pd
import streamlit as st

import sensviz as sv
from ui import state


@dataclass
class Selection:
    """The selected model, loaded, and the input length the pages analyse."""

    ref: state.ModelRef
    ck: sv.Checkpoint
    n: int


def setup(title: str, icon: str = "🧭", needs_model: bool = True) -> Selection | None:
    """Configure the page, draw the sidebar, print the title; returns the selection (or None)."""
    st.set_page_config(page_title=f"{title} · sensviz", page_icon=icon, layout="wide")
    selection = sidebar()
    st.title(title)
    if needs_model and selection is None:
        st.info("No model selected yet. Pick a pretrained checkpoint, upload a `.safetensors` file, or train one on "
                "the **Train** page — the sidebar on the left has all three.")
    return selection


@contextmanager
def progress_bar(text: str):
    """A progress bar for a long computation; yields the callback the core accepts."""
    bar = st.progress(0.0, text=text)
    try:
        yield lambda fraction: bar.progress(min(max(fraction, 0.0), 1.0), text=text)
    finally:
        bar.empty()


def download(table: pd.DataFrame, name: str, label: str = "Download the data (CSV)") -> None:
    """A download button for the data behind a chart."""
    st.download_button(label, table.to_csv(index=False).encode(), file_name=name, mime="text/csv", key=f"dl_{name}")


def exactness_note(exact: bool, n: int, samples: int | None = None, seed: int | None = None) -> None:
    """Say whether the numbers are exact over the cube or Monte Carlo estimates."""
    if exact:
        st.caption(f"Exact: computed over all 2^{n} = {2**n:,} inputs.")
    else:
        st.caption(
            f"**Estimate** (Monte Carlo): n = {n} is above the explorer's exact limit of {state.MODEL_EXACT_LIMIT}, "
            f"so these come from {samples:,} uniformly sampled inputs and their neighbours (seed {seed}); "
            "error bars are ± one standard error."
        )


def choose_input(n: int, key: str) -> tuple[int, ...]:
    """Widgets to pick one input string: toggled bits, a cube index, or a seeded random draw."""
    how = st.segmented_control("Choose the input", ["Toggle bits", "Cube index", "Random"], default="Toggle bits",
                               key=f"{key}_how") or "Toggle bits"
    if how == "Toggle bits":
        chosen = st.pills("Bits set to 1 (position 0 first)", list(range(n)), selection_mode="multi", key=f"{key}_bits_{n}")
        bits = tuple(int(i in chosen) for i in range(n))
    elif how == "Cube index":
        vertex = st.number_input(f"Vertex (0 … {2**n - 1}; position 0 is the most significant bit)", 0, 2**n - 1, 0,
                                 key=f"{key}_vertex_{n}")
        bits = state.bits_of_vertex(n, int(vertex))
    else:
        seed = st.number_input("Seed", 0, 2**31 - 1, 0, key=f"{key}_seed")
        bits = state.bits_of_vertex(n, state.random_vertex(n, int(seed)))
    st.markdown(f"Input **x = {''.join(map(str, bits))}** (vertex {state.vertex_of_bits(bits)})")
    return bits


# ----------------------------------------------------------------------------- the sidebar


def _choose_zoo() -> state.ModelRef | None:
    entries = state.list_zoo()
    if not entries:
        st.caption("No checkpoints in `checkpoints/` yet: build them with `sensviz zoo build`.")
        return None
    frame = pd.DataFrame(entries)
    tasks = sorted(frame["task"].unique())
    archs = sorted(frame["arch"].unique())
    lengths = sorted(int(v) for v in frame["n"].dropna().unique())
    chosen_tasks = st.multiselect("Task", tasks, key="sv_w_zoo_tasks", placeholder="all tasks")
    chosen_archs = st.multiselect("Architecture", archs, key="sv_w_zoo_archs", placeholder="all architectures")
    chosen_n = st.multiselect("Input length n", lengths, key="sv_w_zoo_n", placeholder="all lengths")
    shown = frame[
        frame["task"].isin(chosen_tasks or tasks) & frame["arch"].isin(chosen_archs or archs)
        & (frame["n"].isin(chosen_n) if chosen_n else True)
    ]
    if shown.empty:
        st.caption("No checkpoint matches these filters.")
        return None
    labels = {
        row.file: f"{row.task} · n={row.n} · {row.arch} d={row.d_model}"
        + (f" · acc {row.accuracy:.0%}" if pd.notna(row.accuracy) else "")
        for row in shown.itertuples()
    }
    current = state.selected()
    files = list(labels)
    index = files.index(current.name) if current and current.kind == "zoo" and current.name in labels else None
    file = st.selectbox("Checkpoint", files, index=index, format_func=labels.get, key="sv_w_zoo_file",
                        placeholder="Choose a checkpoint")
    return state.zoo_ref(file) if file else None


def _choose_upload() -> state.ModelRef | None:
    uploaded = st.file_uploader("Checkpoint (.safetensors)", type=["safetensors"], key="sv_w_upload",
                                help=f"sensviz checkpoints or the authors' state dicts; at most {state.UPLOAD_CAP_MB} MB")
    with st.expander("For files without sensviz metadata (the authors' layout)"):
        n_heads = st.number_input("Attention heads", 0, 64, 0, key="sv_w_upload_heads",
                                  help="0: read from the file's metadata. The authors' code defaults to 2.")
        task = st.text_input("Task", "", key="sv_w_upload_task", placeholder="e.g. parity",
                             help="parity, majority, first, mean, sparse_parity:k=3,seed=0, random:seed=0, table:0110")
        n = st.number_input("Trained input length n", 0, 1024, 0, key="sv_w_upload_n", help="0: from the file")
    if uploaded is None:
        current = state.selected()
        return current if current and current.kind == "upload" else None
    return state.register_upload(uploaded.name, uploaded.getvalue(), n_heads or None, task.strip() or None, n or None)


def _choose_trained() -> state.ModelRef | None:
    refs = state.trained_refs()
    if not refs:
        st.caption("No model trained in this session yet: use the **Train** page.")
        return None
    current = state.selected()
    names = [r.name for r in refs]
    index = names.index(current.name) if current and current.kind == "trained" and current.name in names else len(names) - 1
    name = st.selectbox("Model", names, index=index, key="sv_w_trained")
    return refs[names.index(name)]


SOURCES = {"Pretrained": _choose_zoo, "Upload": _choose_upload, "Trained here": _choose_trained}
SOURCE_OF_KIND = {"zoo": "Pretrained", "upload": "Upload", "trained": "Trained here"}


def sidebar() -> Selection | None:
    """Draw the model chooser and the selected model's summary; return the selection."""
    with st.sidebar:
        st.header("Model")
        current = state.selected()
        default = SOURCE_OF_KIND[current.kind if current else "zoo"]
        if st.session_state.pop(state.SHOW_SOURCE, None):  # a model was selected elsewhere (the Train page)
            st.session_state[state.SOURCE] = default
        st.session_state.setdefault(state.SOURCE, default)
        source = st.segmented_control("Source", list(SOURCES), key=state.SOURCE) or default
        ref = SOURCES[source]()
        if ref is not None:
            try:
                state.load(ref)
            except sv.CheckpointError as err:
                st.error(f"This checkpoint cannot be used: {err}")
            else:
                state.select(ref)
        current = state.selected()
        if current is None:
            return None
        try:
            ck = state.load(current)
        except (sv.CheckpointError, KeyError):
            return None
        return _summary(current, ck)


def _summary(ref: state.ModelRef, ck: sv.Checkpoint) -> Selection:
    st.divider()
    st.subheader(ref.name)
    max_len = ck.config.max_len
    n = st.number_input(
        "Analyse at input length n", 1, max_len, state.analysis_n(ref, ck),
        key=f"sv_w_n_{ref.digest[:12]}",
        help=f"The model reads lengths 1..{max_len}; it was trained at n={ck.n}. Exact up to "
        f"n={state.MODEL_EXACT_LIMIT}, sampled above.",
    )
    if ck.task is not None and not _task_defined(ck, int(n)):
        st.warning(f"The task {ck.task.label} is not defined at n={n}; analysing at the trained length n={ck.n}.")
        n = ck.n
    state.set_analysis_n(ref, int(n))
    with progress_bar("Analysing the model on the cube…") as report:
        info = state.summary(ref, ck, int(n), progress=report)
    left, right = st.columns(2)
    left.metric("accuracy", "—" if info["accuracy"] is None else f"{info['accuracy']:.1%}")
    right.metric("param_norm", f"{info['param_norm']:.2f}")
    left.metric("as_n model", f"{info['as_model']:.3f}", help="average sensitivity of the model (thresholded)")
    right.metric("as_n target", "—" if info["as_target"] is None else f"{info['as_target']:.3f}")
    left.metric("mean Blowup", f"{info['blowup_mean']:.4g}", help="E_x Blowup(x) = E_x Π_k max_w (1 + N_w^(k)(x))")
    st.caption(
        f"**{info['task']}** · {info['arch']} · {info['size']} · {info['n_params']:,} parameters · trained at "
        f"n={info['trained_n']} · {'exact' if info['exact'] else 'sampled'} at n={n}"
    )
    st.download_button("Download checkpoint", state.checkpoint_bytes(ref), file_name=_file_name(ref),
                       mime="application/octet-stream", key="sv_w_download_ck")
    return Selection(ref, ck, int(n))


def _task_defined(ck: sv.Checkpoint, n: int) -> bool:
    try:
        ck.task.check_n(n)
    except ValueError:
        return False
    return True


def _file_name(ref: state.ModelRef) -> str:
    return ref.name if ref.name.endswith(".safetensors") else f"{ref.name}.safetensors"
