"""The model in the sidebar of every page: choose a pretrained checkpoint, an upload or one of my
models (kept on the server), then the selected model's summary at the input length analysed, the
second model to compare with, the download and the link to the view.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import streamlit as st

import sensviz as sv
from sensviz.text import escape_markdown, one_line, quoted
from server import services
from server.kept import KeptRefused
from ui import cache, classroom, lab_state, model_refs, owner_id, page, registry, upload_names, uploads, url_state
from ui.model_refs import ModelRef
from ui.page import Selection

SOURCES = ("Pretrained", "Upload", "My models")
SOURCE_OF_KIND = {"zoo": "Pretrained", "upload": "Upload", "trained": "My models"}


def draw() -> Selection | None:
    """The model chooser and the selected model's summary; the selection (None when there is none)."""
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
        st.error(f"The selected model cannot be used any more: {escape_markdown(err)}")
        registry.select(None)
        return None
    return _summary(ref, ck)


def _pick(key: str, make: Callable[[str], ModelRef]) -> Callable[[], None]:
    def picked():
        value = st.session_state.get(key)
        if value:
            try:
                registry.select(make(value))
            except ValueError as err:  # gone or unreadable since it was listed
                url_state.notice(escape_markdown(err))

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
    labels = {e["stem"]: _zoo_label(e) for e in shown}
    current = registry.selected()
    st.session_state[registry.ZOO_FILE] = current.key if current and current.kind == "zoo" and current.key in labels else None
    st.selectbox("Checkpoint", list(labels), index=None, format_func=labels.get, key=registry.ZOO_FILE,
                 placeholder="Choose a checkpoint", on_change=_pick(registry.ZOO_FILE, model_refs.zoo_ref))


def _zoo_label(entry: dict) -> str:
    """A pretrained checkpoint for people, short enough for the sidebar at a 1024-px window:
    `parity n=8 · encoder · 100%` (the model's size is in its summary)."""
    accuracy = f" · {entry['accuracy']:.0%}" if entry["accuracy"] is not None else ""
    return f"{entry['task']} n={entry['n']} · {entry['arch']}{accuracy}"


NAME_CHARS = 120
"""The most characters of an uploaded file's name kept and shown (a longer one is cut with "…")."""


def _choose_upload() -> None:
    uploaded = st.file_uploader("Checkpoint (.safetensors)", type=["safetensors", *cache.TORCH_SUFFIXES],
                                key=uploads.upload_key(),
                                help=f"sensviz checkpoints or the authors' state dicts; at most {cache.UPLOAD_CAP_MB} MB. "
                                "Kept on the server under a random name, so a link can share it. A PyTorch .pt file "
                                "is never opened here: convert it first with `sensviz convert`.")
    with st.expander("For files without sensviz metadata (the authors' layout)"):
        n_heads = st.number_input("Attention heads", 0, 64, 0, key=registry.UPLOAD_HEADS, persist_state="session",
                                  help="0: read from the file's metadata. The authors' code defaults to 2.")
        task = st.text_input("Task", "", key=registry.UPLOAD_TASK, placeholder="e.g. parity", persist_state="session",
                             max_chars=200,
                             help="parity, majority, first, mean, sparse_parity:k=3,seed=0, random:seed=0, table:0110")
        n = st.number_input("Trained input length n", 0, 1024, 0, key=registry.UPLOAD_N, persist_state="session",
                            help="0: from the file")
    if uploaded is None:
        _refused()
        return
    if uploaded.name == upload_names.LONG_NAME:  # a name no file can have, shortened by the server (ui.upload_names)
        uploads.refuse_upload(uploaded, upload_names.LONG_NAME_REFUSED)  # reruns
    name = one_line(uploaded.name, NAME_CHARS) or "upload.safetensors"
    data = uploaded.getvalue()
    overrides = {k: v for k, v in (("n_heads", n_heads or None), ("task", task.strip() or None), ("n", n or None))
                 if v is not None}
    key = (model_refs.digest(data), tuple(sorted(overrides.items())))
    if uploads.kept_upload(key):
        return  # kept (and selected) on an earlier run
    error = cache.check_upload(name, data, overrides)
    if error:
        uploads.refuse_upload(uploaded, f"This file cannot be used: {error}")  # reruns
    try:
        kept = services.kept_store().keep("upload", name, data, owner_id.owner(), overrides, address=owner_id.network_address())
    except KeptRefused as err:  # over the owner's share or the server's cap
        uploads.refuse_upload(uploaded, f"This file was not kept: {quoted(err, 300)}")  # reruns
    uploads.accept_upload()
    uploads.remember_upload(key, kept.token)
    ref = model_refs.kept_ref("upload", kept.token)
    registry.select(ref)
    classroom.upload_kept(ref)  # into the gallery when this session is in a class


def _refused() -> None:
    """The one line about the last refused upload, and which model is still shown."""
    message = uploads.refused_upload()
    if message is None:
        return
    current = registry.selected()
    st.error(message)
    st.caption(f"Still showing **{escape_markdown(current.label)}**, the model selected before this upload; "
               "change the fields above if it says so, then upload the file again." if current
               else "No model is selected; change the fields above if it says so, then upload the file again.")


def _utc(when: float) -> str:
    """A time as the sidebar shows it: to the minute, UTC ("14:05"), the day too when it is not today's."""
    day, now = time.gmtime(when), time.gmtime()
    return time.strftime("%H:%M" if day[:3] == now[:3] else "%Y-%m-%d %H:%M", day)


def _choose_mine() -> None:
    store = services.kept_store()
    mine = {k.token: k for k in store.owned(owner_id.owner())}
    shared = {r.key: r for r in registry.shared_refs() if r.key not in mine and store.info(r.key)}
    if not mine and not shared:
        st.caption("No models of yours yet: train one on the **Train** page or upload one; they are kept on "
                   "the server for you (and for whoever you send a link).")
        return
    names = Counter(k.name for k in mine.values())
    labels = page.distinct(  # newest first; a repeated name with the time it was kept
        {t: f"{k.name} · {k.kind}" + (f" · kept {_utc(k.created)} UTC" if names[k.name] > 1 else "") for t, k in mine.items()}
        | {t: f"{r.name} · shared with you" for t, r in shared.items()})
    kinds = {t: k.kind for t, k in mine.items()} | {t: r.kind for t, r in shared.items()}
    current = registry.selected()
    st.session_state[registry.MINE] = current.key if current and current.key in labels else None
    st.selectbox("Model", list(labels), index=None, format_func=labels.get, key=registry.MINE, placeholder="Choose a model",
                 on_change=_pick(registry.MINE, lambda token: model_refs.kept_ref(kinds[token], token)))
    deletable = current is not None and current.key in mine
    if deletable and st.button("Delete this model", key=registry.DELETE,
                               help="Removes it from the server; links to it stop working."):
        store.delete(current.key, owner_id.owner())
        registry.select(None)
        st.rerun()


def _summary(ref: ModelRef, ck: sv.Checkpoint) -> Selection:
    st.divider()
    st.subheader(escape_markdown(ref.label))
    facts = cache.model_facts(ref)
    key = registry.widget_key("n", ref.digest[:12])
    if key not in st.session_state:
        st.session_state[key] = registry.analysis_n(ref) or cache.default_n(ref)
    n = int(st.number_input("Analyse at input length n", 1, facts["max_len"], key=key,
                            help=f"The model reads lengths 1..{facts['max_len']}; it was trained at n={facts['trained_n']}. "
                            f"Exact up to n={cache.MODEL_EXACT_LIMIT}, sampled above."))
    if not cache.task_defined(ref, n):
        st.warning(f"The task {escape_markdown(facts['task'])} is not defined at n={n}; analysing at the trained length "
                   f"n={facts['trained_n']}.")
        n = facts["trained_n"]
    registry.set_analysis_n(ref, n)
    with page.progress_bar("Analysing the model on the cube…") as report:
        info = cache.summary(ref, n, progress=report)
    waiting = lab_state.withheld()  # a Lab chapter's answer waits for its reveal (lab_state's rule)
    if lab_state.question_open():  # the Lab's question is open: its answer may be among these numbers
        st.caption(WAITING)
    else:
        shown = {"param_norm": ("param_norm", page.figure(info["param_norm"]), None),
                 "as_model": ("as_n model", f"{info['as_model']:.3f}", "average sensitivity of the model (thresholded)"),
                 "as_target": ("as_n target", "—" if info["as_target"] is None else f"{info['as_target']:.3f}", None),
                 "blowup_mean": ("mean Blowup", page.figure(info["blowup_mean"]),
                                 "E_x Blowup(x) = E_x Π_k max_w (1 + N_w^(k)(x))")}
        columns = st.columns(2)  # two by two, accuracy first
        columns[0].metric("accuracy", "—" if info["accuracy"] is None else f"{info['accuracy']:.1%}")
        for i, (label, value, note) in enumerate(v for k, v in shown.items() if k not in waiting):
            columns[(i + 1) % 2].metric(label, value, help=note)
        if waiting:
            st.caption(lab_state.waiting_words(waiting, {k: label for k, (label, _, _) in shown.items()}))
    st.caption(f"**{escape_markdown(info['task'] or 'unknown task')}** · {escape_markdown(info['arch'])} · "
               f"{escape_markdown(info['size'])} · {info['n_params']:,} parameters "
               f"· trained at n={info['trained_n']} · {'exact' if info['exact'] else 'sampled'} at n={n}")
    for note in ck.notes:
        st.caption(f"Note: {cache.in_app_terms(note)}.")
    compare, compare_n = _choose_compare(ref, n)
    left, right = st.columns(2)
    with left:
        st.download_button("Download", lambda: model_refs.model_bytes(ref), file_name=_file_name(ref), on_click="ignore",
                           mime="application/octet-stream", key=registry.DOWNLOAD, help="the checkpoint (.safetensors)")
    with right:
        copy_link_button()
    return Selection(ref, ck, n, compare, compare_n)


WAITING = "The numbers of this summary wait for your prediction in the Lab."

NO_COMPARE = ""
"""The "Compare with…" choice of no second model."""


def _compare_value(ref: ModelRef) -> str:
    """A model as an option of "Compare with…": a zoo stem, or `kind:token` (what `model_refs.resolve` reads)."""
    return ref.key if ref.kind == "zoo" else f"{ref.kind}:{ref.key}"


def _compare_picked() -> None:
    value = st.session_state.get(registry.COMPARE_WITH) or NO_COMPARE
    if value == NO_COMPARE:
        registry.set_compared(None)
        return
    try:
        registry.set_compared(model_refs.resolve(value)[0])
    except ValueError as err:
        url_state.notice(f"That model cannot be compared: {quoted(err, 200)}.")


def _choose_compare(ref: ModelRef, n: int) -> tuple[ModelRef | None, int | None]:
    """"Compare with…": any pretrained checkpoint or kept model beside the selected one (the analysis
    pages show both). It is analysed at the selected model's n when it can read it; otherwise at
    its own default length, and a one-line notice says so."""
    current = registry.compared()
    if current == ref:  # the compared model became the selected one
        registry.set_compared(current := None)
    options = {NO_COMPARE: "nothing: one model"}
    options |= {e["stem"]: _zoo_label(e) for e in cache.zoo_entries() if not (ref.kind == "zoo" and e["stem"] == ref.key)}
    options |= {_compare_value(r): r.label for r in page.my_models() if r != ref}
    value = _compare_value(current) if current else NO_COMPARE
    options.setdefault(value, current.label if current else "")
    options = page.distinct(options)
    st.session_state[registry.COMPARE_WITH] = value
    st.selectbox("Compare with…", list(options), format_func=options.get, key=registry.COMPARE_WITH,
                 on_change=_compare_picked,
                 help="A second model beside this one on the Attention, Sensitivity, LayerNorm and Landscape pages, "
                 "on the same colour scales and axes.")
    if current is None:
        return None, None
    try:
        cache.load(current)
    except sv.CheckpointError as err:
        st.warning(f"The compared model cannot be used any more: {escape_markdown(err)}")
        registry.set_compared(None)
        return None, None
    facts = cache.model_facts(current)
    compare_n = n if n <= facts["max_len"] and cache.task_defined(current, n) else facts["default_n"]
    if compare_n != n:
        why = f"reads lengths 1..{facts['max_len']}" if n > facts["max_len"] else f"its task is not defined at n={n}"
        st.warning(f"{escape_markdown(current.label)} {why}: it is analysed at n={compare_n}.")
    with page.progress_bar("Analysing the second model…") as report:
        info = cache.summary(current, compare_n, progress=report)
    waiting = lab_state.withheld()  # as in the summary above
    parts = {"as_model": f"as_n {info['as_model']:.3f}",
             "accuracy": "" if info["accuracy"] is None else f"accuracy {info['accuracy']:.1%}",
             "blowup_mean": f"mean Blowup {page.figure(info['blowup_mean'])}"}
    numbers = WAITING if lab_state.question_open() else " · ".join(
        part for name, part in parts.items() if part and name not in waiting)
    st.caption(f"Compared with **{escape_markdown(current.label)}** at n={compare_n}: {numbers}")
    if cache.same_weights(ref, current):
        st.info("These two are the same model, weight for weight (two training runs of the same settings and seed "
                "are: for two that differ, train with another **seed**).", icon=":material/content_copy:")
    return current, compare_n


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
