"""The Train page's form: widgets -> a `TrainRequest`, generated from the task registry and the settings.

The task's parameters come from its class in the registry (`sensviz.tasks.TASKS`: each `Param`'s
type, range, default and help), the model's and the trainer's fields from `ModelSettings` and
`TrainConfig` (`sensviz.configs.settings_of`: type, range, default, help), so a new task or setting
appears here without touching this file. Values are kept for the whole session (`persist_state`),
so a page switch does not reset them; a preset fills them in. Early stopping is on by default
(100 % accuracy and MSE < 0.001, the paper's convergence filter). Every number widget is bounded
by the setting's limit and the server's cap (`server.worker.LIVE_LIMITS`), and the caption under
Train states the server's budget per run (`server.budget`).
"""

from __future__ import annotations

import math

import streamlit as st

import sensviz as sv
from sensviz.configs import Setting, settings_of
from sensviz.models import ModelSettings
from sensviz.tasks import Param
from sensviz.training import TrainConfig
from server import services
from server.worker import LIVE_LIMITS, TrainRequest
from ui import registry

DEFAULTS = {"task": "parity", "n": 8, "steps": 2000, "batch_size": 256, "lr": 1e-3, "eval_interval": 50,
            "target_accuracy": 1.0, "target_loss": 0.001, "measure_every": 100, "early_stop": True}
"""Where the form starts when it differs from the settings' own defaults (the paper's batch 1024
and 10,000 steps are minutes here)."""
SERVER_SIDE = {"device"}
"""Settings the server decides, not the form."""
EARLY_STOP = {"target_accuracy", "target_loss"}

PRESETS = {
    "PARITY, n = 8 (converges in seconds)": {"task": "parity", "n": 8, "arch": "encoder", "d_model": 16,
                                             "n_layers": 2, "n_heads": 2, "batch_size": 256, "full_batch": True,
                                             "lr": 5e-3, "steps": 3000, "seed": 1, "measure_every": 50,
                                             "eval_interval": 25},
    "FIRST, n = 8": {"task": "first", "n": 8, "arch": "encoder", "d_model": 32, "n_layers": 2, "n_heads": 2,
                     "batch_size": 256, "lr": 1e-3, "steps": 2000, "seed": 0, "measure_every": 100, "eval_interval": 25},
    "MAJORITY, n = 9": {"task": "majority", "n": 9, "arch": "encoder", "d_model": 32, "n_layers": 2, "n_heads": 2,
                        "batch_size": 256, "lr": 1e-3, "steps": 3000, "seed": 0, "measure_every": 100,
                        "eval_interval": 50},
    "PARITY, n = 12 (slow: minutes)": {"task": "parity", "n": 12, "arch": "encoder", "d_model": 32, "n_layers": 2,
                                       "n_heads": 2, "batch_size": 256, "lr": 1e-3, "steps": 8000, "seed": 0,
                                       "measure_every": 250, "eval_interval": 50},
    "few examples: a random function from 64 of 256 inputs": {
        "task": "random", "task_seed": 0, "n": 8, "train_size": 64, "batch_size": 256, "lr": 3e-3, "steps": 3000,
        "measure_every": 50, "eval_interval": 50},
}
"""Starting points; each fills in these fields, the others start from the form's defaults."""


def key(field: str) -> str:
    return registry.widget_key("train", field)


def _task_key(task: str, param: str) -> str:
    return key(f"task_{task}_{param}")


def _apply_preset() -> None:
    apply_preset(st.session_state.get(registry.TRAIN_PRESET))


def apply_preset(name: str | None) -> None:
    """Fill the form with a preset (also from another page: the Lab's "try it yourself"), over the form's
    defaults: nothing of an earlier preset or edit (a restricted set, full batches) stays behind."""
    if name in PRESETS:
        st.session_state[registry.TRAIN_PRESET] = name
        fill({**form_defaults(), **PRESETS[name]})


def _fields(values: dict) -> dict:
    """A preset's values by the session-state key of the form field each fills."""
    values = dict(values)
    seed = {_task_key(values["task"], "seed"): values.pop("task_seed")} if "task_seed" in values else {}
    return seed | {key(field): value for field, value in values.items()}


def fill(values: dict) -> None:
    """Fill these form fields (a preset's, or a class assignment's: `ui.classroom`); the others stay."""
    for field, value in _fields(values).items():
        st.session_state[field] = value


JS_INT = 2**53 - 1
"""The largest integer a browser's number widget holds exactly."""


def _bound(value: float | None, kind: type, cap: float | None = None):
    """A widget bound: the limit, tightened by the server's cap and what a browser can hold; None when unbounded."""
    if value is None or not math.isfinite(value):
        value = cap
    elif cap is not None:
        value = min(value, cap)
    return None if value is None else kind(max(-JS_INT, min(JS_INT, value)))


def _number(container, label: str, kind: type, low, high, help_text: str, widget_key: str, optional: bool):
    """A number widget whose value lives in session state (set by `_defaults` and presets); an optional
    setting may be left empty (None)."""
    return container.number_input(label, min_value=low, max_value=high, value=None, step=1 if kind is int else None,
                                  format=None if kind is int else "%.4g", help=help_text, key=widget_key,
                                  persist_state="session", placeholder="not set" if optional else "required")


def setting_widget(container, s: Setting, widget_key: str):
    """One widget for one settings field, from its type, range, choices, default and help."""
    cap = LIVE_LIMITS.get(s.name)
    if s.choices is not None:
        return container.selectbox(s.name, s.choices, key=widget_key, help=s.help, persist_state="session")
    if s.type is bool:
        return container.checkbox(s.name, key=widget_key, help=s.help, persist_state="session")
    if s.type is str:
        return container.text_input(s.name, key=widget_key, help=s.help, persist_state="session") or None
    low = _bound(s.limit.low if s.limit else None, s.type)
    if s.limit is not None and s.limit.open_low and s.type is float:
        low = None  # an open bound (lr > 0): the setting's own check says so in one line
    high = _bound(s.limit.high if s.limit else None, s.type, cap)
    return _number(container, s.name, s.type, low, high, s.help, widget_key, s.optional)


def param_widget(container, task: str, p: Param):
    """One widget for one task parameter (`sensviz.tasks.Param`)."""
    widget_key = _task_key(task, p.name)
    if p.type is str:
        return container.text_input(f"{p.name} ({task})", key=widget_key, help=p.help, persist_state="session")
    return _number(container, f"{p.name} ({task})", p.type, _bound(p.low, p.type), _bound(p.high, p.type), p.help,
                   widget_key, not p.required)


def form_defaults() -> dict:
    """Every field's starting value: DEFAULTS, else the setting's own default."""
    found = {s.name: DEFAULTS.get(s.name, s.default) for cls in (ModelSettings, TrainConfig) for s in settings_of(cls)}
    return found | {field: DEFAULTS[field] for field in ("task", "measure_every", "early_stop")}


def _defaults() -> None:
    """Every widget's starting value (`form_defaults`), and each task parameter's own default."""
    for field, value in form_defaults().items():
        st.session_state.setdefault(key(field), value)
    for name, cls in sv.tasks.TASKS.items():
        for p in cls.parameters:
            if not p.required:
                st.session_state.setdefault(_task_key(name, p.name), p.default)


def _grid(items, columns: int = 3):
    """Place widgets `columns` to a row: yields (container, item). Three: at a 1024 px window a number widget of a
    four-column row showed two digits of its value."""
    for start in range(0, len(items), columns):
        row = st.columns(columns)
        yield from zip(row, items[start : start + columns])


def form(note=None) -> TrainRequest | None:
    """Draw the presets and the form; the request when Train was pressed (else None). `note(request)`: a
    line shown above Train for the request the form holds now (None: nothing to say), e.g. that the run
    would not be the class's assignment run."""
    _defaults()
    chosen = st.session_state.get(registry.TRAIN_PRESET)
    filled = _fields({**form_defaults(), **PRESETS[chosen]}) if chosen in PRESETS else {}  # what apply_preset filled
    if any(st.session_state.get(k) != v for k, v in filled.items()):
        st.session_state[registry.TRAIN_PRESET] = None  # edited since, or a new session's defaults: not that preset
    st.selectbox("Preset", list(PRESETS), index=None, key=registry.TRAIN_PRESET, on_change=_apply_preset,
                 placeholder="Start from a preset (fills in the form)…", persist_state="session",
                 help="A preset fixes the seed, so everyone who runs it trains the same model; change **seed** for a "
                 "run of your own")
    tasks = sv.tasks.TASKS
    with st.container(border=True):  # not st.form: its values would only reach the server on submit
        cols = st.columns([1, 3])
        task = cols[0].selectbox("task", list(tasks), key=key("task"), persist_state="session",
                                 format_func=lambda name: name, help="; ".join(
                                     f"{name}: {cls.description}" for name, cls in tasks.items()))
        params = {p.name: param_widget(c, task, p) for c, p in _grid(list(tasks[task].parameters), 3)}
        cols[1].caption(tasks[task].description)
        st.markdown("**Model**")
        model = {s.name: setting_widget(c, s, key(s.name)) for c, s in _grid(list(settings_of(ModelSettings)))}
        st.markdown("**Training**")
        shown = [s for s in settings_of(TrainConfig) if s.name not in SERVER_SIDE | EARLY_STOP]
        train = {s.name: setting_widget(c, s, key(s.name)) for c, s in _grid(shown)}
        early = st.checkbox("stop early", key=key("early_stop"), persist_state="session",
                                 help="at the targets below: the paper's convergence filter is 100 % accuracy "
                                 "and MSE < 0.001")
        cols = st.columns(3)
        for c, s in zip(cols[:2], [s for s in settings_of(TrainConfig) if s.name in EARLY_STOP]):
            train[s.name] = setting_widget(c, s, key(s.name)) if early else None
        every = cols[2].number_input("measure every … steps", 1, LIVE_LIMITS["measure_every"], key=key("measure_every"),
                                     persist_state="session",
                                     help="sharpness, Blowup, as_n and the degree profile; skipped while measuring "
                                     "would take longer than training")
        if note is not None:
            try:
                said = note(_request(task, params, model, train, every))
            except ValueError:  # the task's parameters are not valid yet: Train says why
                said = None
            if said:
                st.warning(said, icon=":material/edit_note:")
        submitted = st.button("Train", type="primary", key=registry.TRAIN_BUTTON)
        st.caption(f"A run may take at most {services.job_manager().budget.describe()} on this server (its cost is "
                   "estimated before it is queued); the queue takes turns between network addresses.")
    return _request(task, params, model, train, every) if submitted else None


def _request(task: str, params: dict, model: dict, train: dict, every) -> TrainRequest:
    """The request the form's values make (ValueError for a task's parameters that do not make a task)."""
    label = sv.tasks.TASKS[task](**{k: v for k, v in params.items() if v not in (None, "")}).label
    return TrainRequest(task=label, model=model, train=train, measure_every=int(every))
