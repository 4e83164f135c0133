"""Length generalization: a model trained at some lengths, read at every length it can take.

The theory predicts that a sensitive function learned at length n does not carry over to other
lengths (paper/summary.txt: arbitrarily small deviations from a length-generalizing minimum fail
on long enough inputs), while low-sensitivity functions (FIRST, MEAN) may. For each length m this
reports the model's accuracy on the task and its average sensitivity as_m (of the thresholded
output, and of the real output in the influence form) next to the task's own — the `sensitivity`
quantity of `sensviz.measure` at that length (exact over the cube up to the settings' exact
limit, seeded Monte Carlo estimates with stderr above) — and, for scratchpad models, the accuracy
of their greedy decode (the `decoding` quantity).
"""

from __future__ import annotations

from collections.abc import Iterable

from .analysis import Progress
from .base import TracedModel
from .measure import MeasureSettings, measure
from .scratchpad import ScratchpadTransformer
from .tasks import ZERO_ONE, TargetEncoding, Task, get_task


def length_generalization(
    model: TracedModel,
    task: Task | str,
    lengths: Iterable[int],
    encoding: TargetEncoding = ZERO_ONE,
    trained: Iterable[int] = (),
    settings: MeasureSettings | None = None,
    progress: Progress | None = None,
) -> list[dict]:
    """One row per length (JSON-compatible): `n`, `trained` (n in `trained`), the fields of the
    `sensitivity` measurement (accuracy, avg_sensitivity, avg_sensitivity_real,
    task_avg_sensitivity, exact, degree profiles or stderrs) and, for scratchpad models,
    `autoregressive_accuracy` and `answer_accuracy`. Raises ValueError for a length outside
    1..max_len or one the task lacks.
    """
    task = get_task(task)
    lengths = sorted(set(lengths))
    if not lengths:
        raise ValueError("give at least one length")
    for n in lengths:
        model.check_task(task, n)
    trained = set(trained)
    quantities = ("sensitivity", "decoding") if isinstance(model, ScratchpadTransformer) else ("sensitivity",)
    rows = []
    for i, n in enumerate(lengths):
        if progress:
            progress(i / len(lengths))
        found = measure(model, task, n, settings, quantities, encoding)
        row = {"n": n, "trained": n in trained, **found.sensitivity.to_dict()}
        if found.decoding is not None:
            row.update(autoregressive_accuracy=found.decoding["autoregressive_accuracy"],
                       answer_accuracy=found.decoding["answer_accuracy"])
        rows.append(row)
    if progress:
        progress(1.0)
    return rows
