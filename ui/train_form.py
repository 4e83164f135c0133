"""The Train page's form: widgets -> a `TrainRequest`, with presets and early stopping.

The one place that knows the form's fields, so that it can be generated from the task registry
and the `TrainConfig` fields later. Values are kept for the whole session (`persist_state`), so a
page switch does not reset them; a preset fills them in.
"""

from __future__ import annotations

import streamlit as st

import sensviz as sv
from ui import registry
from ui.worker import ARCHITECTURES, MAX_LIVE_N, TrainRequest

DEFAULTS = {
    "task": "parity", "n": 8, "arch": "encoder", "seed": 0, "k": 3, "task_seed": 0, "table": "0110",
    "d_model": 32, "n_layers": 2, "n_heads": 2, "batch_size": 256, "steps": 2000, "lr": 1e-3,
    "weight_decay": 0.1, "every": 100, "loss": "mse", "pm1": False,
    "early_stop": True, "target_accuracy": 1.0, "target_loss": 0.001, "eval_interval": 50,
}
"""The form's values before a preset or the user changes them (early stopping on: 100 % accuracy
and MSE < 0.001, the paper's convergence filter)."""

PRESETS = {
    "PARITY, n = 8 (converges in seconds)": {"task": "parity", "n": 8, "arch": "encoder", "d_model": 32, "n_layers": 2,
                                             "n_heads": 2, "batch_size": 256, "lr": 3e-3, "steps": 3000, "seed": 0,
                                             "every": 200, "eval_interval": 25},
    "FIRST, n = 8": {"task": "first", "n": 8, "arch": "encoder", "d_model": 32, "n_layers": 2, "n_heads": 2,
                     "batch_size": 256, "lr": 1e-3, "steps": 2000, "seed": 0, "every": 100, "eval_interval": 25},
    "MAJORITY, n = 9": {"task": "majority", "n": 9, "arch": "encoder", "d_model": 32, "n_layers": 2, "n_heads": 2,
                        "batch_size": 256, "lr": 1e-3, "steps": 3000, "seed": 0, "every": 100, "eval_interval": 50},
    "PARITY, n = 12 (slow: minutes)": {"task": "parity", "n": 12, "arch": "encoder", "d_model": 32, "n_layers": 2,
                                       "n_heads": 2, "batch_size": 256, "lr": 1e-3, "steps": 8000, "seed": 0,
                                       "every": 250, "eval_interval": 50},
}
"""Starting points; each fills in these fields and leaves the others as they are."""
D_MODELS = [8, 16, 32, 64, 128]
BATCHES = [32, 64, 128, 256, 512, 1024]


def key(field: str) -> str:
    return registry.widget_key("train", field)


def _apply_preset() -> None:
    preset = PRESETS.get(st.session_state.get(registry.TRAIN_PRESET))
    for field, value in (preset or {}).items():
        st.session_state[key(field)] = value


def form() -> TrainRequest | None:
    """Draw the presets and the form; the request when the form was submitted (else None)."""
    for field, value in DEFAULTS.items():
        st.session_state.setdefault(key(field), value)
    st.selectbox("Preset", list(PRESETS), index=None, key=registry.TRAIN_PRESET, on_change=_apply_preset,
                 placeholder="Start from a preset (fills in the form)…", persist_state="session")
    keep = {"persist_state": "session"}
    with st.container(border=True):  # not st.form: its values would only reach the server on submit
        cols = st.columns(4)
        task = cols[0].selectbox("Task", sv.tasks.TASK_NAMES, key=key("task"), **keep)
        n = cols[1].number_input("Input length n", 1, MAX_LIVE_N, key=key("n"), **keep)
        arch = cols[2].selectbox("Architecture", ARCHITECTURES, key=key("arch"), **keep,
                                 help="encoder: the paper's experimental model; formal: its theoretical one")
        seed = cols[3].number_input("Seed", 0, 2**31 - 1, key=key("seed"), **keep,
                                    help="the initial weights and the stream of training strings")
        cols = st.columns(4)
        k = cols[0].number_input("k (sparse parity)", 1, MAX_LIVE_N, key=key("k"), **keep)
        task_seed = cols[1].number_input("Task seed (sparse, random)", 0, 2**31 - 1, key=key("task_seed"), **keep)
        table = cols[2].text_input("Truth table (table task)", key=key("table"), **keep,
                                   help="2**n characters 0/1 in vertex order (position 0 is the most significant bit)")
        cols = st.columns(4)
        d_model = cols[0].select_slider("d_model", D_MODELS, key=key("d_model"), **keep)
        n_layers = cols[1].number_input("Layers", 1, 6, key=key("n_layers"), **keep)
        n_heads = cols[2].number_input("Heads", 1, 8, key=key("n_heads"), **keep)
        batch_size = cols[3].select_slider("Batch size", BATCHES, key=key("batch_size"), **keep)
        cols = st.columns(4)
        steps = cols[0].number_input("Steps (at most)", 1, 100_000, step=100, key=key("steps"), **keep)
        lr = cols[1].number_input("Learning rate", 1e-6, 1.0, step=1e-4, format="%.5f", key=key("lr"), **keep)
        weight_decay = cols[2].number_input("Weight decay", 0.0, 10.0, step=0.05, key=key("weight_decay"), **keep)
        every = cols[3].number_input("Measure every … steps", 1, 100_000, key=key("every"), **keep,
                                     help="sharpness, Blowup, as_n and the degree profile; skipped while measuring "
                                     "would take longer than training")
        cols = st.columns(4)
        loss = cols[0].radio("Loss", ["mse", "bce"], horizontal=True, key=key("loss"), **keep,
                             help="mse on {0,1} targets is the paper's default; bce trains logits")
        pm1 = cols[1].checkbox("±1 targets (mse)", key=key("pm1"), **keep)
        cols = st.columns(4)
        early_stop = cols[0].checkbox("Stop early at the target", key=key("early_stop"), **keep,
                                      help="the paper's convergence filter: 100 % accuracy and MSE < 0.001")
        target_accuracy = cols[1].number_input("Target accuracy", 0.01, 1.0, step=0.01, format="%.2f",
                                               key=key("target_accuracy"), **keep)
        target_loss = cols[2].number_input("Target loss (at most)", 1e-8, 10.0, format="%.4g", key=key("target_loss"),
                                           **keep)
        eval_interval = cols[3].number_input("Check the target every … steps", 1, 10_000, key=key("eval_interval"),
                                             **keep)
        submitted = st.button("Train", type="primary", key=registry.TRAIN_BUTTON)
    if not submitted:
        return None
    label = {"sparse_parity": f"sparse_parity:k={k},seed={task_seed}", "random": f"random:seed={task_seed}",
             "table": f"table:{table.strip()}"}.get(task, task)
    train = {"n": int(n), "steps": int(steps), "batch_size": int(batch_size), "lr": float(lr),
             "weight_decay": float(weight_decay), "loss": loss, "pm1_targets": bool(pm1), "seed": int(seed),
             "eval_interval": int(eval_interval),
             "target_accuracy": float(target_accuracy) if early_stop else None,
             "target_loss": float(target_loss) if early_stop else None}
    return TrainRequest(task=label, arch=arch, model={"d_model": int(d_model), "n_layers": int(n_layers),
                                                      "n_heads": int(n_heads)},
                        train=train, measure_every=int(every))
