"""Where training goes, on the Before training page: initialisation 0 of the page's study trained on its target as a
class-server job (`sensviz.init_training.path_job`, queued and capped like the Train page's runs, its worker tracing
the scale-free quantities through the monitor), followed as the session's job (`ui.registry.followed_job`, so
the sidebar shows it and a link made while it runs restores it; once it ended, the link names its model, whose
checkpoint records the job), its path drawn from the job's records.
"""

from __future__ import annotations

import streamlit as st

from sensviz.init_training import path_job
from sensviz.models import ModelSettings
from sensviz.text import quoted
from server import jobs, services
from server.worker import TrainRequest
from ui import job_panel, registry


def request(arch: str, d_model: int, n_layers: int, n: int, task: str, steps: int) -> TrainRequest:
    """The job that trains the study's initialisation 0 (init scale 1, seed 0) for `steps` full-batch steps."""
    settings = ModelSettings(arch=arch, d_model=d_model, n_layers=n_layers, n_heads=2)
    return TrainRequest(**path_job(settings, n, task, steps))


def followed(wanted: TrainRequest) -> jobs.JobStatus | None:
    """The job of this very request (another run, or the same view with other settings, is not this path): the
    one this session follows, else the one that trained the selected model (a link made after the run ended
    names that model: its checkpoint records its job)."""
    manager = services.job_manager()
    for find in (registry.followed_job, job_panel.job_of_selected):  # the selected model read only when needed
        job_id = find()
        if job_id is not None and manager.request(job_id) == wanted:
            return manager.status(job_id)
    return None


def submit(wanted: TrainRequest) -> None:
    """The Train button's callback (before the page runs, so the sidebar and the URL show the job at once): queue
    the job and follow it, or keep the one line saying why the server refused it (`refusal`)."""
    try:
        job_id = job_panel.submit(wanted)
    except (jobs.JobRefused, ValueError) as err:
        st.session_state[registry.INIT_REFUSED] = f"Cannot train this initialisation now: {quoted(err, 300)}"
        return
    registry.follow_job(job_id)


def refusal() -> str | None:
    """The refusal of the last click, once."""
    return st.session_state.pop(registry.INIT_REFUSED, None)


def status(job_id: str) -> jobs.JobStatus | None:
    """The job's state now."""
    return services.job_manager().status(job_id)


def records(job_id: str) -> list[dict]:
    """The job's measurements so far."""
    return services.job_manager().records(job_id)
