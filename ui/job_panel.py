"""The training job in the sidebar of every page and on the Train page: progress or place in the
queue, Stop or Cancel, and the one message about how the run ended (whose model then becomes the
selected one), also to an owner who was away when it ended: their next session says it once
(`JobManager.unseen`). The sidebar part refreshes itself (`st.fragment(run_every=...)`).
"""

from __future__ import annotations

import contextlib

import streamlit as st

from sensviz.checkpoints import CheckpointError
from sensviz.text import escape_markdown, quoted
from server import jobs, services
from ui import cache, classroom, model_refs, owner_id, registry

RERUN_HOPS = 8
"""How many continuations of a run (`JobStatus.rerun`: one per restart) a page following it goes along."""


def draw() -> str | None:
    """The job this session follows (its own, or one named in the URL; this person's run that a restart ended and
    that was continued: the continuation; their run queued or running, before a finished one followed), while it
    runs and once it ended; returns its id while it is worth keeping in the URL. This person: `classroom.my_runs`."""
    manager = services.job_manager()
    mine = classroom.my_runs()
    job_id = registry.followed_job()
    if job_id is None or not _active(job_id):
        job_id = _first(manager.active, mine.owners, mine) or job_id
    # once a session for each owner id: their run that ended while no page of theirs was open (a model named by a
    # link comes first; the owner's next session without one says it)
    if job_id is None and registry.selected() is None:
        job_id = _first(manager.unseen, registry.not_asked_away(mine.owners), mine, mark=registry.asked_away)
    if job_id is None:
        return None
    status = manager.status(job_id)
    for _ in range(RERUN_HOPS):  # their run went on as another (continued after a restart, maybe from another tab)
        if status is None or status.rerun is None or not mine.owns(status.id, status.owner):
            break
        job_id, status = status.rerun, manager.status(status.rerun)
    if status is None:
        registry.follow_job(None)
        return None
    registry.follow_job(job_id)
    if status.active:
        (_running_job if status.state == "running" else _queued_job)()
        return job_id
    if status.kept:
        if not registry.job_done(job_id):  # once: the user may pick another model afterwards
            _shown(status)
            try:
                ref = model_refs.kept_ref("trained", status.kept)
            except ValueError as err:  # evicted since (the server keeps a limited total)
                st.warning(f"**{escape_markdown(status.name)}** ended, but its model is gone: {quoted(err, 300)}.")
                return None
            registry.select(ref, show=True)
            if status.owner != mine.me:  # a run someone shared by its link, or one of this member's other browsers
                registry.add_shared(ref)
        current = registry.selected()
        if current is not None and current.key == status.kept:
            show_outcome(status)
            offer_rerun(status)
    elif not registry.job_done(job_id):  # failed or cancelled: said until dismissed
        show_outcome(status)
        offer_rerun(status)
        if st.button("Dismiss", key=registry.JOB_STOP):
            _shown(status)
            st.rerun()
    return None


def submit(request) -> str:
    """Queue a run (the Train form's, the Init page's) for this session's owner; its id. `JobManager.submit`'s
    refusals, and a JobRefused while a class run of this member's other browsers (`classroom.my_runs`) is queued
    or running: one run per person, as per owner."""
    _refuse_a_second()
    return services.job_manager().submit(owner_id.owner(), request, owner_id.client_address())


def _refuse_a_second() -> None:
    """JobRefused while a run of this person's from another browser is queued or running."""
    manager, mine = services.job_manager(), classroom.my_runs()
    other = _first(manager.active, mine.others, mine)
    if other is not None:
        status = manager.status(other)
        raise jobs.JobRefused(f"You already have a training run {status.state} ({status.name}), started in another "
                              "browser: stop or cancel it first (in the sidebar).")


def _active(job_id: str) -> bool:
    status = services.job_manager().status(job_id)
    return status is not None and status.active


def _first(ask, owners: tuple[str, ...], mine: classroom.Runs, mark=None) -> str | None:
    """The first job id `ask` (`JobManager.active` or `.unseen`) names for one of `owners` that is this person's
    (`mine`); `mark(owner)` for each owner asked."""
    for owner in owners:
        if mark is not None:
            mark(owner)
        job_id = ask(owner)
        if job_id is not None and mine.owns(job_id, owner):
            return job_id
    return None


def _mine(status: jobs.JobStatus) -> bool:
    """Whether the job is this person's (`classroom.my_runs`): theirs to stop, cancel or continue. The manager is
    then asked as the job's owner."""
    return classroom.my_runs().owns(status.id, status.owner)


def offer_rerun(status: jobs.JobStatus, key: str = registry.JOB_RERUN) -> None:
    """A run of this person's (`_mine`) that a server restart ended: one click queues it again with the settings it had
    (`JobManager.rerun`), from the step its snapshot holds where it has one; the Train form of the session after a
    restart holds its defaults, not that run's settings. Once: a run already run again (from another tab) is not
    offered."""
    if not _mine(status) or not status.ended_by_restart or status.rerun is not None:
        return
    if status.resume_step is not None:
        label = f"Continue from step {status.resume_step:,}"
        note = "Goes on from the last measurement's step exactly as the run would have gone on without the restart"
    else:
        label, note = "Run it again with the same settings", "Queues a new run with this run's settings; it starts from step 0"
    if not st.button(label, key=key, type="primary", help=note):
        return
    manager = services.job_manager()
    try:
        if status.owner != owner_id.owner() and manager.active(owner_id.owner()) is not None:  # one run per person
            raise jobs.JobRefused("you have a training run going in this browser: stop or cancel it first")
        job_id = manager.rerun(status.id, status.owner, owner_id.client_address())
        request = manager.request(job_id)
    except (jobs.JobRefused, ValueError) as err:
        st.error(f"Cannot run it again: {quoted(err, 300)}")
        return
    _shown(status)
    found = classroom.class_of_job(status.id)  # the class's run again, in the cell it trained (dealt again since)
    if found is not None:
        classroom.job_started(job_id, request, found, found.jobs[status.id].get("assignment"))
    registry.follow_job(job_id)
    st.rerun()


def _shown(status: jobs.JobStatus) -> None:
    """This session has shown how the job ended: not again in it, nor in the owner's next (`JobManager.unseen`;
    best effort: a queue that does not answer now leaves it to be said once more)."""
    registry.mark_job_done(status.id)
    if _mine(status):
        with contextlib.suppress(jobs.JobRefused):
            services.job_manager().mark_seen(status.id, status.owner)


def job_of_selected() -> str | None:
    """The id of the server job that trained the selected model, as its checkpoint records it (a link made after
    the run ended names the model, not the job)."""
    ref = registry.selected()
    if ref is None:
        return None
    try:
        training = cache.load(ref).metadata.get("training") or {}
    except CheckpointError:
        return None
    job_id = training.get("job") if isinstance(training, dict) else None
    return job_id if isinstance(job_id, str) and jobs.JOB_ID.fullmatch(job_id) else None


def _job_in_sidebar(state: str) -> None:
    status = services.job_manager().status(registry.followed_job())
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
    mine = _mine(status)
    if status.state == "queued":
        manager = services.job_manager()
        st.info(f"**{escape_markdown(status.name)}** waits in the queue: **{_ordinal(status.position)}** in line "
                f"(the server trains up to {manager.capacity} model{'s' if manager.capacity > 1 else ''} at a time).")
        if mine and st.button("Cancel", key=key):
            services.job_manager().stop(status.id, status.owner)
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
        st.progress(min(step / steps, 1.0), text=f"**{escape_markdown(status.name)}**: " + " · ".join(parts))
    else:
        st.progress(0.0, text=f"**{escape_markdown(status.name)}**: starting (a fresh process loads the trainer)…")
    if mine and st.button("Stop and keep what was learned", key=key,
                          help="Ends the run now; the weights of its last measurement become the selected model."):
        services.job_manager().stop(status.id, status.owner)
        st.rerun()


def outcome_message(status: jobs.JobStatus) -> str:
    """The one message about how a training run ended (the sidebar and the Train page both show it)."""
    reason = {"early_stop": "reached the target (early stop)", "completed": "completed every step"}.get(
        status.reason, quoted(status.reason, 300))
    name = escape_markdown(status.name)
    if status.state == "failed":
        return f"**{name}** failed: {quoted(status.error, 300)}"
    if status.state == "cancelled":
        return f"**{name}** was cancelled: {quoted(status.reason, 300)}."
    text = f"**{name}** {reason}" if status.reason in ("early_stop", "completed") else f"**{name}**: {reason}"
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
