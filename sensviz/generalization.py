"""Length generalization: a model trained at some lengths, read at every length it can take.

The theory predicts that a sensitive function learned at length n does not carry over to other
lengths (paper/summary.txt: arbitrarily small deviations from a length-generalizing minimum fail
on long enough inputs), while low-sensitivity functions (FIRST, MEAN) may. For each length m in
1..max_len this reports the model's accuracy on the task and its average sensitivity as_m (of the
thresholded output, and of the real output in the influence form) next to the task's own:
exact over the cube for m <= exact_limit, seeded Monte Carlo estimates (with stderr) above.
Scratchpad models add the accuracy of their greedy decode (`sensviz.scratchpad`).
"""

from __future__ import annotations

from typing import Iterable

from . import cube
from .analysis import Progress, inspect_model
from .scratchpad import ScratchpadTransformer, autoregressive_accuracy
from .tasks import ZERO_ONE, Task, TargetEncoding, get_task
from .base import TracedModel


def length_generalization(
    model: TracedModel,
    task: Task | str,
    lengths: Iterable[int],
    encoding: TargetEncoding = ZERO_ONE,
    trained: Iterable[int] = (),
    exact_limit: int = 14,
    n_samples: int = 2048,
    seed: int = 0,
    progress: Progress | None = None,
) -> list[dict]:
    """One row per length (JSON-compatible): `n`, `trained` (n in `trained`), `accuracy`,
    `avg_sensitivity`, `avg_sensitivity_real`, `task_avg_sensitivity`, `exact` (and `stderr`,
    `stderr_real`, `n_samples` when sampled; `autoregressive_accuracy`, `answer_accuracy` for
    scratchpad models). Raises ValueError for a length outside 1..max_len or one the task lacks.
    """
    task = get_task(task)
    lengths = sorted(set(lengths))
    if not lengths:
        raise ValueError("give at least one length")
    for n in lengths:
        model.check_task(task, n)
    trained = set(trained)
    rows = []
    for i, n in enumerate(lengths):
        if progress:
            progress(i / len(lengths))
        row = {"n": n, "trained": n in trained,
               **inspect_model(model, n, task, encoding, exact_limit=exact_limit, n_samples=n_samples, seed=seed)}
        if isinstance(model, ScratchpadTransformer):
            bits = cube.vertices(n) if n <= exact_limit else cube.sample(n, n_samples, seed)
            row.update(autoregressive_accuracy(model, bits, encoding))
        rows.append(row)
    if progress:
        progress(1.0)
    return rows
