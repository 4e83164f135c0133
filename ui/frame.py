"""The frame the router draws around every page: the owner's cookie, the public URL parameters
(`model`, `compare`, `n`, `job`, `class`: read on a session's first run, written on every run), the
sidebar (the training job, the model, the class), the page's title and the notices about its URL.
"""

from __future__ import annotations

import streamlit as st

import sensviz as sv
from sensviz.text import escape_markdown, quoted
from server import services
from ui import cache, classroom, job_panel, model_refs, moved, owner_id, page, registry, sidebar, uploads, url_state
from ui.model_refs import ModelRef
from ui.nav import PageSpec

N_DIGITS = 6
"""The most digits of `n=` read as a number (the model's own range is checked next)."""


def draw(spec: PageSpec) -> None:
    """Everything around a page; the page's selection goes to `ui.page.model()`."""
    owner_id.owner()
    classroom.drop_instructor_code()
    classroom.take_instructor_code()
    allowed = (*spec.params, classroom.INSTRUCTOR_PARAM)  # it leaves the URL on its own (`ui.classroom`)
    incoming = url_state.read_url()
    if incoming is not None:
        _apply_url(incoming)
        url_state.check_url_params(allowed)
    url_state.keep_only(allowed)
    joining = classroom.joining()  # a class link opened by a non-member: its join form goes first
    with st.sidebar:
        if owner_id.cookies_blocked():  # said first: the rest of the sidebar is what a reload would lose
            st.warning(owner_id.COOKIES_BLOCKED)
        if joining:
            classroom.sidebar()
        job_id = job_panel.draw()
        selection = sidebar.draw()
        if not joining:
            classroom.sidebar()
        script = owner_id.owner_cookie_script()
        if script:
            st.html(script, unsafe_allow_javascript=True)
    st.session_state[registry.CURRENT] = selection
    url_state.write_url({
        "model": selection.ref.param if selection else None,
        "n": str(selection.n) if selection and selection.n != cache.default_n(selection.ref) else None,
        "compare": selection.compare.param if selection and selection.compare else None,
        "job": job_id,
        "class": classroom.url_value(),
    })
    st.title(spec.heading)
    moved.notice(room=spec.file == "pages/class.py" and page.Settings("class").flag_now("projector"))
    page.notices_here()
    if joining:
        classroom.joining_hint(joining)
    elif registry.current_class():
        classroom.notices(registry.current_class(), job_panel.offer_rerun, spec.file == "pages/train.py")  # live
    refused = uploads.refused_upload() if st.session_state.get(registry.SOURCE) == "Upload" else None
    if refused is not None:  # said here too, while the sidebar shows the upload: its line sits below a laptop's fold
        st.error(f"Your upload was not used. {refused}")
    if spec.needs_model and selection is None:
        st.info("No model selected yet. Pick a pretrained checkpoint, upload a `.safetensors` file, or train one on "
                "the **Train** page — the sidebar on the left has all three.")


def _apply_url(params: dict[str, str]) -> None:
    """The first run's public parameters: select the model, the length, the comparison, the job."""
    ref = _resolve("model", params.get("model"))
    if ref is not None:
        registry.select(ref, show=True)
        raw_n = params.get("n")
        if raw_n is not None:
            facts = cache.model_facts(ref)
            n = int(raw_n) if raw_n.isascii() and raw_n.isdigit() and len(raw_n) <= N_DIGITS else None
            if n is None or not 1 <= n <= facts["max_len"]:
                why = f"the model reads lengths 1..{facts['max_len']}"
            elif not cache.task_defined(ref, n):
                why = f"{escape_markdown(facts['task'])} is not defined at n={n}"
            else:
                why = None
                registry.set_analysis_n(ref, n)
            if why:
                url_state.notice(f"n={quoted(raw_n)} was not used: {why}. Showing n={facts['default_n']}.")
    elif "n" in params:
        url_state.notice(f"n={quoted(params['n'])} was ignored: it needs a model.")
    other = _resolve("compare", params.get("compare"))
    if other is not None and other == ref:
        url_state.notice(f"compare={quoted(params['compare'])} names the model itself; there is nothing to compare.")
    elif other is not None:
        registry.set_compared(other)
    if params.get("class"):
        classroom.enter(params["class"])
    job_id = params.get("job")
    if job_id is not None:
        if services.job_manager().status(job_id) is None:
            url_state.notice(f"job={quoted(job_id)} names no training run on this server (a mistyped link, or one from "
                            "another server).")
        else:
            registry.follow_job(job_id)


def _resolve(param: str, value: str | None) -> ModelRef | None:
    if value is None:
        return None
    try:
        ref, warning = model_refs.resolve(value)
        cache.load(ref)  # validated like any upload
    except (ValueError, sv.CheckpointError) as err:
        url_state.notice(f"{param}={quoted(value)} was not used: {quoted(err, 200)}.")
        return None
    if warning:
        url_state.notice(escape_markdown(warning))
    if ref.kind != "zoo" and services.kept_store().info(ref.key).owner != owner_id.owner():
        registry.add_shared(ref)
    return ref
