"""Live training for the Train page: sensviz's trainer with a callback that streams measurements
to the page and keeps a snapshot of the weights in the session at every measurement, so that a
stop (which interrupts the script run) keeps what was learned.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

import streamlit as st

import sensviz as sv
from sensviz.checkpoints import checkpoint_bytes
from sensviz.measure import MeasureSettings
from sensviz.monitor import MeasurementCallback
from sensviz.training import TrainConfig, train
from ui import state

ARCHITECTURES = ("encoder", "formal")
MAX_LIVE_N = 24
"""Longest input the Train page trains on (the positional range of the models it builds)."""


@dataclass(frozen=True)
class TrainRequest:
    """What the Train page's form asks for."""

    task: str  # a task label, e.g. "parity" or "sparse_parity:k=3,seed=0"
    n: int
    arch: str
    d_model: int
    n_layers: int
    n_heads: int
    steps: int
    batch_size: int
    lr: float
    weight_decay: float
    loss: str
    pm1_targets: bool
    seed: int
    every: int  # measure every this many steps

    @property
    def name(self) -> str:
        return f"{self.task}-n{self.n}-{self.arch}-d{self.d_model}-seed{self.seed}"


def prepare(request: TrainRequest):
    """The model, task and training config of a request; ValueError with the reason for bad values."""
    task = sv.get_task(request.task)
    if request.arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture '{request.arch}'")
    if request.every < 1:
        raise ValueError("measure at least every step (every >= 1)")
    model = sv.build_model(request.arch, d_model=request.d_model, n_layers=request.n_layers,
                           n_heads=request.n_heads, max_len=max(request.n, MAX_LIVE_N), seed=request.seed)
    config = TrainConfig(n=request.n, batch_size=request.batch_size, steps=request.steps, lr=request.lr,
                         weight_decay=request.weight_decay, loss=request.loss, pm1_targets=request.pm1_targets,
                         seed=request.seed, eval_interval=request.every)
    config.check(model, task)
    return model, task, config


class LiveCallback(MeasurementCallback):
    """Measures every `every` steps; after each measurement, snapshots the weights into the
    session and calls `show(records)`; reports progress after every step."""

    def __init__(self, request: TrainRequest, show: Callable[[list[dict]], None], progress: Callable[[float, str], None]):
        super().__init__(every=request.every, settings=MeasureSettings(directions=16))
        self.request, self.show, self.progress = request, show, progress

    def _record(self, run, model, step):
        super()._record(run, model, step)
        data = checkpoint_bytes(model, task=run.task, n=run.config.n, encoding=run.config.encoding,
                                training={"trainer": "sensviz.training (live, Train page)", "steps": step,
                                          "config": run.config.to_dict(), "request": asdict(self.request)})
        st.session_state[state.TRAIN_RUN] = {"name": self.request.name, "records": list(self.records), "bytes": data,
                                             "step": step, "steps": run.config.steps, "status": "running"}
        self.show(self.records)

    def on_step(self, run):
        super().on_step(run)
        if run.step % max(1, run.config.steps // 100) == 0:
            loss = f", training loss {run.loss:.4g}" if run.loss is not None else ""
            self.progress(run.step / run.config.steps, f"step {run.step:,} of {run.config.steps:,}{loss}")


def run(request: TrainRequest, show, progress) -> state.ModelRef:
    """Train live; the finished model becomes a session model (selected) and the run's summary is kept."""
    model, task, config = prepare(request)
    start = time.perf_counter()
    result = train(model, task, config, [LiveCallback(request, show, progress)])
    snapshot = st.session_state[state.TRAIN_RUN]
    data = checkpoint_bytes(result.model, task=task, n=config.n, encoding=config.encoding,
                            training={**result.summary(with_history=True), "request": asdict(request)})
    return _keep(snapshot, data, result.stop_reason, result.steps, time.perf_counter() - start)


def _keep(snapshot: dict, data: bytes, reason: str, steps: int, seconds: float | None) -> state.ModelRef:
    name = _unique(snapshot["name"])
    ref = state.register_trained(name, data)
    state.select(ref, show=True)
    st.session_state[state.TRAIN_RUN] = {**snapshot, "name": name, "status": "finished", "reason": reason,
                                         "step": steps, "seconds": seconds, "bytes": data}
    return ref


def keep_interrupted() -> state.ModelRef | None:
    """A run interrupted by the stop button (or by leaving the page) becomes a session model with
    the weights of its last measurement."""
    snapshot = st.session_state.get(state.TRAIN_RUN)
    if not snapshot or snapshot["status"] != "running":
        return None
    return _keep(snapshot, snapshot["bytes"], f"stopped at step {snapshot['step']:,}", snapshot["step"], None)


def last_run() -> dict | None:
    return st.session_state.get(state.TRAIN_RUN)


def _unique(name: str) -> str:
    taken = st.session_state.get(state.TRAINED, {})
    if name not in taken:
        return name
    count = 2
    while f"{name} ({count})" in taken:
        count += 1
    return f"{name} ({count})"
