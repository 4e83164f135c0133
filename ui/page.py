"""What every page shares: the frame the router draws around a page (the owner's cookie, the
public URL parameters, the sidebar with the model and the training job, the title, notices), page
settings kept in the URL, and small shared widgets (progress bars, downloads, the input chooser).

`frame(spec)` runs in `app.py` before the page; a page then calls `model()` for the selected
model (`Selection`; the page stops with the frame's hint when there is none) and draws its
settings with `choice`, `number`, `flag` and `choose_input`, which keep them in the session and
in the URL (`ui.registry`).
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import pandas as pd
import streamlit as st

import sensviz as sv
from ui import cache, charts, jobs, registry
from ui.nav import PageSpec
from ui.registry import ModelRef


@dataclass
class Selection:
    """The selected model, loaded, the input length the pages analyse, and the model to compare with."""

    ref: ModelRef
    ck: sv.Checkpoint
    n: int
    compare: ModelRef | None = None


_NOTICE_SLOT: contextvars.ContextVar = contextvars.ContextVar("sv_notice_slot", default=None)
_PAGE: contextvars.ContextVar = contextvars.ContextVar("sv_page", default="home")


# ----------------------------------------------------------------------------- the frame


def frame(spec: PageSpec) -> None:
    """Everything around a page; the page's selection goes to `model()`."""
    _PAGE.set(spec.key)
    registry.owner()
    incoming = registry.read_url()
    if incoming is not None:
        _apply_url(incoming)
        registry.check_url_params(spec.params)
    registry.keep_only(spec.params)
    with st.sidebar:
        job_id = _job_panel()
        selection = _model_sidebar()
        script = registry.owner_cookie_script()
        if script:
            st.html(script, unsafe_allow_javascript=True)
    st.session_state[registry.CURRENT] = selection
    registry.write_url({
        "model": selection.ref.param if selection else None,
        "n": str(selection.n) if selection and selection.n != cache.default_n(selection.ref) else None,
        "compare": selection.compare.param if selection and selection.compare else None,
        "job": job_id,
    })
    st.title(spec.heading)
    _NOTICE_SLOT.set(st.container())
    flush_notices()
    if spec.needs_model and selection is None:
        st.info("No model selected yet. Pick a pretrained checkpoint, upload a `.safetensors` file, or train one on "
                "the **Train** page — the sidebar on the left has all three.")


def model() -> Selection:
    """The selected model; stops the page when there is none (the frame already said what to do)."""
    selection = st.session_state.get(registry.CURRENT)
    if selection is None:
        st.stop()
    return selection


def flush_notices() -> None:
    """Show the notices collected so far at the top of the page, one line each."""
    slot = _NOTICE_SLOT.get()
    for text in registry.take_notices():
        (slot or st).warning(text, icon=":material/link:")


def _apply_url(params: dict[str, str]) -> None:
    """The first run's public parameters: select the model, the length, the comparison, the job."""
    ref = _resolve("model", params.get("model"))
    if ref is not None:
        registry.select(ref, show=True)
        raw_n = params.get("n")
        if raw_n is not None:
            facts = cache.model_facts(ref)
            n = int(raw_n) if raw_n.isdigit() else None
            if n is None or not 1 <= n <= facts["max_len"]:
                why = f"the model reads lengths 1..{facts['max_len']}"
            elif not cache.task_defined(ref, n):
                why = f"{facts['task']} is not defined at n={n}"
            else:
                why = None
                registry.set_analysis_n(ref, n)
            if why:
                registry.notice(f"`n={raw_n}` was not used: {why}. Showing n={facts['default_n']}.")
    elif "n" in params:
        registry.notice(f"`n={params['n']}` was ignored: it needs a model.")
    other = _resolve("compare", params.get("compare"))
    if other is not None:
        registry.set_compared(other)
    job_id = params.get("job")
    if job_id is not None:
        if registry.job_manager().status(job_id) is None:
            registry.notice(f"`job={job_id}` names no training run on this server (a mistyped link, or one from "
                            "another server).")
        else:
            registry.follow_job(job_id)


def _resolve(param: str, value: str | None) -> ModelRef | None:
    if value is None:
        return None
    try:
        ref, warning = registry.resolve(value)
        cache.load(ref)  # validated like any upload
    except (ValueError, sv.CheckpointError) as err:
        registry.notice(f"`{param}={value}` was not used: {err}.")
        return None
    if warning:
        registry.notice(warning)
    if ref.kind != "zoo" and registry.kept_store().info(ref.key).owner != registry.owner():
        registry.add_shared(ref)
    return ref


# ----------------------------------------------------------------------------- the training job


def _job_panel() -> str | None:
    """The job this session follows (its own, or one named in the URL), while it runs and once it
    ended; returns its id while it is worth keeping in the URL."""
    manager = registry.job_manager()
    job_id = registry.followed_job() or manager.active(registry.owner())
    if job_id is None:
        return None
    status = manager.status(job_id)
    if status is None:
        registry.follow_job(None)
        return None
    registry.follow_job(job_id)
    if status.active:
        (_running_job if status.state == "running" else _queued_job)()
        return job_id
    if status.kept:
        if not registry.job_done(job_id):  # once: the user may pick another model afterwards
            registry.mark_job_done(job_id)
            try:
                ref = registry.kept_ref("trained", status.kept)
            except ValueError as err:  # evicted since (the server keeps a limited total)
                st.warning(f"**{status.name}** ended, but its model is gone: {err}.")
                return None
            registry.select(ref, show=True)
            if status.owner != registry.owner():  # a run someone shared by its link
                registry.add_shared(ref)
        current = registry.selected()
        if current is not None and current.key == status.kept:
            show_outcome(status)
    elif not registry.job_done(job_id):  # failed or cancelled: said until dismissed
        show_outcome(status)
        if st.button("Dismiss", key=registry.JOB_STOP):
            registry.mark_job_done(job_id)
            st.rerun()
    return None


def _job_in_sidebar(state: str) -> None:
    status = registry.job_manager().status(registry.followed_job())
    if status is None or status.state != state:
        st.rerun()  # the whole page takes it from here: started, or ended and its model selected
    st.subheader("Training")
    show_progress(status, key=registry.JOB_STOP)


@st.fragment(run_every=1.0)
def _running_job() -> None:
    """Progress and Stop, refreshed every second on every page."""
    _job_in_sidebar("running")


@st.fragment(run_every=3.0)
def _queued_job() -> None:
    """The place in the queue and Cancel, refreshed every three seconds on every page."""
    _job_in_sidebar("queued")


def show_progress(status: jobs.JobStatus, key: str) -> None:
    """A job's progress (or its place in the queue) and the button that stops or cancels it."""
    mine = status.owner == registry.owner()
    if status.state == "queued":
        manager = registry.job_manager()
        st.info(f"**{status.name}** waits in the queue: **{_ordinal(status.position)}** in line "
                f"(the server trains {manager.capacity} model{'s' if manager.capacity > 1 else ''} at a time).")
        if mine and st.button("Cancel", key=key):
            registry.job_manager().stop(status.id, registry.owner())
            st.rerun()
        return
    progress = status.progress
    if progress:
        step, steps = progress["step"], progress["steps"]
        parts = [f"step {step:,} of {steps:,}"]
        if progress.get("eval_accuracy") is not None:
            parts.append(f"accuracy {progress['eval_accuracy']:.1%}")
        if progress.get("eval_loss") is not None:
            parts.append(f"eval loss {progress['eval_loss']:.3g}")
        st.progress(min(step / steps, 1.0), text=f"**{status.name}**: " + " · ".join(parts))
    else:
        st.progress(0.0, text=f"**{status.name}**: starting (a fresh process loads the trainer)…")
    if mine and st.button("Stop and keep what was learned", key=key,
                          help="Ends the run now; the weights of its last measurement become the selected model."):
        registry.job_manager().stop(status.id, registry.owner())
        st.rerun()


def outcome_message(status: jobs.JobStatus) -> str:
    """The one message about how a training run ended (the sidebar and the Train page both show it)."""
    reason = {"early_stop": "reached the target (early stop)", "completed": "completed every step"}.get(
        status.reason, status.reason)
    if status.state == "failed":
        return f"**{status.name}** failed: {status.error}"
    if status.state == "cancelled":
        return f"**{status.name}** was cancelled: {status.reason}."
    text = f"**{status.name}** {reason}"
    if status.state == "finished":
        text += f" after {status.steps:,} steps" + (f" in {status.seconds:.1f} s" if status.seconds else "")
    if status.kept:
        text += ". It is the selected model now (in the sidebar, and on every page)."
    return text + ("" if text.endswith(".") else ".")


def show_outcome(status: jobs.JobStatus) -> None:
    message = outcome_message(status)
    if status.state == "finished" and not status.reason.startswith("diverged"):
        st.success(message)
    else:
        st.warning(message)


def _ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


# ----------------------------------------------------------------------------- the model in the sidebar

SOURCES = ("Pretrained", "Upload", "My models")
SOURCE_OF_KIND = {"zoo": "Pretrained", "upload": "Upload", "trained": "My models"}


def _model_sidebar() -> Selection | None:
    st.header("Model")
    current = registry.selected()
    shown = st.session_state.pop(registry.SHOW_SOURCE, None)
    if shown:
        st.session_state[registry.SOURCE] = SOURCE_OF_KIND[shown]
    st.session_state.setdefault(registry.SOURCE, SOURCE_OF_KIND[current.kind] if current else SOURCES[0])
    source = st.segmented_control("Source", SOURCES, key=registry.SOURCE) or SOURCES[0]
    {"Pretrained": _choose_zoo, "Upload": _choose_upload, "My models": _choose_mine}[source]()
    ref = registry.selected()
    if ref is None:
        return None
    try:
        ck = cache.load(ref)
    except sv.CheckpointError as err:
        st.error(f"The selected model cannot be used any more: {err}")
        registry.select(None)
        return None
    compare = registry.compared()
    return _summary(ref, ck, compare)


def _pick(key: str, make: Callable[[str], ModelRef]) -> Callable[[], None]:
    def picked():
        value = st.session_state.get(key)
        if value:
            registry.select(make(value))

    return picked


def _choose_zoo() -> None:
    entries = cache.zoo_entries()
    if not entries:
        st.caption("No checkpoints in `checkpoints/` yet: build them with `sensviz zoo build`.")
        return
    tasks = sorted({e["task"] for e in entries})
    archs = sorted({e["arch"] for e in entries})
    lengths = sorted({e["n"] for e in entries if e["n"] is not None})
    chosen_tasks = st.multiselect("Task", tasks, key=registry.ZOO_TASKS, placeholder="all tasks", persist_state="session")
    chosen_archs = st.multiselect("Architecture", archs, key=registry.ZOO_ARCHS, placeholder="all architectures",
                                  persist_state="session")
    chosen_n = st.multiselect("Input length n", lengths, key=registry.ZOO_N, placeholder="all lengths",
                              persist_state="session")
    shown = [e for e in entries if e["task"] in (chosen_tasks or tasks) and e["arch"] in (chosen_archs or archs)
             and (e["n"] in chosen_n if chosen_n else True)]
    if not shown:
        st.caption("No checkpoint matches these filters.")
        return
    labels = {e["stem"]: f"{e['task']} · n={e['n']} · {e['arch']} d={e['d_model']}"
              + (f" · acc {e['accuracy']:.0%}" if e["accuracy"] is not None else "") for e in shown}
    current = registry.selected()
    st.session_state[registry.ZOO_FILE] = current.key if current and current.kind == "zoo" and current.key in labels else None
    st.selectbox("Checkpoint", list(labels), index=None, format_func=labels.get, key=registry.ZOO_FILE,
                 placeholder="Choose a checkpoint", on_change=_pick(registry.ZOO_FILE, registry.zoo_ref))


def _choose_upload() -> None:
    uploaded = st.file_uploader("Checkpoint (.safetensors)", type=["safetensors"], key=registry.UPLOAD_FILE,
                                help=f"sensviz checkpoints or the authors' state dicts; at most {cache.UPLOAD_CAP_MB} MB. "
                                "Kept on the server under a random name, so a link can share it.")
    with st.expander("For files without sensviz metadata (the authors' layout)"):
        n_heads = st.number_input("Attention heads", 0, 64, 0, key=registry.UPLOAD_HEADS, persist_state="session",
                                  help="0: read from the file's metadata. The authors' code defaults to 2.")
        task = st.text_input("Task", "", key=registry.UPLOAD_TASK, placeholder="e.g. parity", persist_state="session",
                             help="parity, majority, first, mean, sparse_parity:k=3,seed=0, random:seed=0, table:0110")
        n = st.number_input("Trained input length n", 0, 1024, 0, key=registry.UPLOAD_N, persist_state="session",
                            help="0: from the file")
    if uploaded is None:
        return
    data = uploaded.getvalue()
    overrides = {k: v for k, v in (("n_heads", n_heads or None), ("task", task.strip() or None), ("n", n or None))
                 if v is not None}
    key = (registry.digest(data), tuple(sorted(overrides.items())))
    if registry.kept_upload(key):
        return  # kept (and selected) on an earlier run
    error = cache.check_upload(uploaded.name, data, overrides)
    if error:
        current = registry.selected()
        st.error(f"This file cannot be used: {error}")
        st.caption(f"Still showing **{current.label}**." if current else "No model is selected.")
        return
    kept = registry.kept_store().keep("upload", uploaded.name, data, registry.owner(), overrides)
    registry.remember_upload(key, kept.token)
    registry.select(registry.kept_ref("upload", kept.token))


def _choose_mine() -> None:
    store = registry.kept_store()
    mine = {k.token: k for k in store.owned(registry.owner())}
    shared = {r.key: r for r in registry.shared_refs() if r.key not in mine and store.info(r.key)}
    if not mine and not shared:
        st.caption("No models of yours yet: train one on the **Train** page or upload one; they are kept on "
                   "the server for you (and for whoever you send a link).")
        return
    labels = {t: f"{k.name} · {k.kind}" for t, k in mine.items()} | {t: f"{r.name} · shared with you" for t, r in shared.items()}
    kinds = {t: k.kind for t, k in mine.items()} | {t: r.kind for t, r in shared.items()}
    current = registry.selected()
    st.session_state[registry.MINE] = current.key if current and current.key in labels else None
    st.selectbox("Model", list(labels), index=None, format_func=labels.get, key=registry.MINE, placeholder="Choose a model",
                 on_change=_pick(registry.MINE, lambda token: registry.kept_ref(kinds[token], token)))
    if current is not None and current.key in mine:
        if st.button("Delete this model", key=registry.DELETE, help="Removes it from the server; links to it stop working."):
            store.delete(current.key, registry.owner())
            registry.select(None)
            st.rerun()


def _summary(ref: ModelRef, ck: sv.Checkpoint, compare: ModelRef | None) -> Selection:
    st.divider()
    st.subheader(ref.label)
    facts = cache.model_facts(ref)
    key = registry.widget_key("n", ref.digest[:12])
    if key not in st.session_state:
        st.session_state[key] = registry.analysis_n(ref) or cache.default_n(ref)
    n = int(st.number_input("Analyse at input length n", 1, facts["max_len"], key=key,
                            help=f"The model reads lengths 1..{facts['max_len']}; it was trained at n={facts['trained_n']}. "
                            f"Exact up to n={cache.MODEL_EXACT_LIMIT}, sampled above."))
    if not cache.task_defined(ref, n):
        st.warning(f"The task {facts['task']} is not defined at n={n}; analysing at the trained length n={facts['trained_n']}.")
        n = facts["trained_n"]
    registry.set_analysis_n(ref, n)
    with progress_bar("Analysing the model on the cube…") as report:
        info = cache.summary(ref, n, progress=report)
    left, right = st.columns(2)
    left.metric("accuracy", "—" if info["accuracy"] is None else f"{info['accuracy']:.1%}")
    right.metric("param_norm", f"{info['param_norm']:.2f}")
    left.metric("as_n model", f"{info['as_model']:.3f}", help="average sensitivity of the model (thresholded)")
    right.metric("as_n target", "—" if info["as_target"] is None else f"{info['as_target']:.3f}")
    left.metric("mean Blowup", f"{info['blowup_mean']:.4g}", help="E_x Blowup(x) = E_x Π_k max_w (1 + N_w^(k)(x))")
    st.caption(f"**{info['task'] or 'unknown task'}** · {info['arch']} · {info['size']} · {info['n_params']:,} parameters "
               f"· trained at n={info['trained_n']} · {'exact' if info['exact'] else 'sampled'} at n={n}")
    if compare is not None:
        st.caption(f"Compared with **{compare.label}**.")
    left, right = st.columns(2)
    with left:
        st.download_button("Download", lambda: registry.model_bytes(ref), file_name=_file_name(ref), on_click="ignore",
                           mime="application/octet-stream", key=registry.DOWNLOAD, help="the checkpoint (.safetensors)")
    with right:
        copy_link_button()
    return Selection(ref, ck, n, compare)


def copy_link_button() -> None:
    """A button that copies the browser's current URL: the link to this view (every setting is in it)."""
    st.html(
        """<button class="sv-copy-link" title="Copies the link to this view: model, length and every setting"
        style="width:100%;padding:0.3rem 0.5rem;border-radius:0.5rem;border:1px solid rgba(49,51,63,0.2);
        background:transparent;cursor:pointer;font:inherit">Copy link</button>
        <script>
        for (const button of document.querySelectorAll('button.sv-copy-link:not([data-ready])')) {
          button.dataset.ready = '1';
          button.addEventListener('click', async () => {
            const url = window.location.href;
            try { await navigator.clipboard.writeText(url); button.textContent = 'Link copied'; }
            catch (err) { window.prompt('Copy the link to this view:', url); }
            setTimeout(() => { button.textContent = 'Copy link'; }, 2000);
          });
        }
        </script>""",
        unsafe_allow_javascript=True,
    )


def _file_name(ref: ModelRef) -> str:
    return ref.name if ref.name.endswith(".safetensors") else f"{ref.name}.safetensors"


# ----------------------------------------------------------------------------- page settings in the URL


def _bound(param: str, default, parse: Callable[[str], object], fmt: Callable[[object], str],
           valid: Callable[[object], bool], draw: Callable[[str], object], variant: object = ""):
    """A page setting drawn by `draw(key)`: seeded from the session or the URL, written back to both."""
    page = _PAGE.get()
    value = registry.setting(page, param, default, parse)
    flush_notices()
    if not valid(value):  # e.g. a vertex of another input length
        value = default
    key = registry.widget_key(page, param, variant) if variant != "" else registry.widget_key(page, param)
    if key not in st.session_state:
        st.session_state[key] = value
    value = draw(key)
    registry.set_setting(page, param, value, default, fmt)
    return value


def choice(param: str, label: str, options: list, default=None, widget=st.selectbox, fmt: Callable = str,
           format_func: Callable = str, variant: object = "", **kwargs):
    """A choice among `options` (a selectbox, radio, segmented control...), kept in the URL as `fmt(option)`."""
    default = options[0] if default is None else default
    by_text = {fmt(o): o for o in options}

    def parse(raw: str):
        if raw not in by_text:
            raise ValueError(f"{param} is one of {', '.join(by_text)}")
        return by_text[raw]

    def draw(key):
        found = widget(label, options=options, format_func=format_func, key=key, **kwargs)
        return default if found is None else found  # a segmented control can be cleared

    return _bound(param, default, parse, fmt, lambda v: v in options, draw, variant)


def number(param: str, label: str, low: float, high: float, default, widget=st.number_input, integer: bool = True,
           variant: object = "", **kwargs):
    """A number in [low, high], kept in the URL."""
    cast = int if integer else float

    def parse(raw: str):
        try:
            value = cast(raw)
        except ValueError:
            raise ValueError(f"{param} is {'an integer' if integer else 'a number'} in {low:g}..{high:g}") from None
        if not low <= value <= high:
            raise ValueError(f"{param} is in {low:g}..{high:g}")
        return value

    def draw(key):
        return cast(widget(label, min_value=low, max_value=high, key=key, **kwargs))

    return _bound(param, default, parse, lambda v: f"{v:g}" if not integer else str(v),
                  lambda v: isinstance(v, (int, float)) and low <= v <= high, draw, variant)


def flag(param: str, label: str, widget=st.toggle, **kwargs) -> bool:
    """An on/off setting (off by default), kept in the URL as `param=1`."""

    def parse(raw: str):
        if raw.lower() not in ("1", "0", "true", "false"):
            raise ValueError(f"{param} is 1 or 0")
        return raw.lower() in ("1", "true")

    return _bound(param, False, parse, lambda v: "1" if v else "0", lambda v: isinstance(v, bool),
                  lambda key: bool(widget(label, key=key, **kwargs)))


def set_value(param: str, value, default, fmt: Callable = str, variant: object = "") -> None:
    """Change a page setting from a callback (before its widget is drawn), e.g. after a click on a chart."""
    page = _PAGE.get()
    st.session_state[registry.widget_key(page, param, variant) if variant != "" else registry.widget_key(page, param)] = value
    registry.set_setting(page, param, value, default, fmt)


def chart_key(name: str, variant: object = "") -> str:
    """The key of a chart whose selection the page reads."""
    return registry.widget_key(_PAGE.get(), "chart", name, variant)


def pick_vertex(n: int) -> Callable[[], None]:
    """The callback of a click on the cube grid: the clicked vertex becomes the `vertex` setting."""
    page = _PAGE.get()

    def picked():
        _PAGE.set(page)
        event = st.session_state.get(chart_key("grid", n))
        chosen = (event or {}).get("selection", {}).get(charts.PICK) or []
        if chosen:
            set_value("vertex", int(chosen[0]["vertex"]), 0, variant=n)

    return picked


def my_models() -> list[ModelRef]:
    """The user's kept models and the ones shared with them in this session."""
    store = registry.kept_store()
    refs = []
    for kept in store.owned(registry.owner()):
        try:
            refs.append(registry.kept_ref(kept.kind, kept.token))
        except ValueError:  # deleted or evicted meanwhile
            continue
    return refs + [r for r in registry.shared_refs() if r not in refs and store.info(r.key)]


def choose_compare(candidates: list[ModelRef]) -> ModelRef | None:
    """Choose the second model among `candidates`: the public `compare` parameter."""
    if not candidates:
        st.info("No other model with the same architecture and size is available (pretrained, or kept by you).")
        return None
    by_param = {c.param: c for c in candidates}
    key = registry.widget_key(_PAGE.get(), "compare")
    current = registry.compared()
    st.session_state[key] = current.param if current in candidates else None

    def picked():
        registry.set_compared(by_param.get(st.session_state.get(key)))

    st.selectbox("Second model", list(by_param), index=None, key=key, placeholder="Choose a model of the same size",
                 format_func=lambda p: by_param[p].label, on_change=picked)
    return current if current in candidates else None


def choose_input(n: int) -> tuple[int, ...]:
    """Pick one input string by toggling bits, by cube index or by a seeded draw; kept in the URL as `x=0110…`."""
    page = _PAGE.get()

    def parse(raw: str):
        if len(raw) != n or set(raw) - {"0", "1"}:
            raise ValueError(f"x is a string of {n} bits 0/1")
        return raw

    x = registry.setting(page, "x", "0" * n, parse)
    flush_notices()
    if len(x) != n:  # another input length than last time
        x = "0" * n
    bits = tuple(int(b) for b in x)
    how = st.segmented_control("Choose the input", ["Toggle bits", "Cube index", "Random"], default="Toggle bits",
                               key=registry.widget_key(page, "input_how")) or "Toggle bits"
    if how == "Toggle bits":
        key = registry.widget_key(page, "input_bits", n)
        st.session_state.setdefault(key, [i for i in range(n) if bits[i]])
        chosen = st.pills("Bits set to 1 (position 0 first)", list(range(n)), selection_mode="multi", key=key)
        bits = tuple(int(i in chosen) for i in range(n))
    elif how == "Cube index":
        key = registry.widget_key(page, "input_vertex", n)
        st.session_state.setdefault(key, cache.vertex_of_bits(bits))
        vertex = st.number_input(f"Vertex (0 … {2**n - 1}; position 0 is the most significant bit)", 0, 2**n - 1,
                                 key=key)
        bits = cache.bits_of_vertex(n, int(vertex))
    else:
        seed = st.number_input("Seed", 0, 2**31 - 1, 0, key=registry.widget_key(page, "input_seed"))
        bits = cache.bits_of_vertex(n, cache.random_vertex(n, int(seed)))
    x = "".join(map(str, bits))
    registry.set_setting(page, "x", x, "0" * n)
    st.markdown(f"Input **x = {x}** (vertex {cache.vertex_of_bits(bits)})")
    return bits


# ----------------------------------------------------------------------------- small shared widgets


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
    st.download_button(label, table.to_csv(index=False).encode(), file_name=name, mime="text/csv",
                       key=registry.widget_key("download", name))


def exactness_note(exact: bool, n: int, samples: int | None = None, seed: int | None = None) -> None:
    """Say whether the numbers are exact over the cube or Monte Carlo estimates."""
    if exact:
        st.caption(f"Exact: computed over all 2^{n} = {2**n:,} inputs.")
    else:
        st.caption(
            f"**Estimate** (Monte Carlo): n = {n} is above the explorer's exact limit of {cache.MODEL_EXACT_LIMIT}, "
            f"so these come from {samples:,} uniformly sampled inputs and their neighbours (seed {seed}); "
            "error bars are ± one standard error."
        )
