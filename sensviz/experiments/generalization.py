"""Generalization (the paper's Fig. 4, 15): a random function at length n, trained on `train_size`
fixed inputs until it fits; the learned truth table's as_n against random completions of the same
training data (seeded by the run's seed), and each of the learned table and one completion
retrained on the whole cube (a `table:` task) to measure its sharpness.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import altair as alt
import numpy as np
import pandas as pd

from .. import stats
from ..claims import (
    PROXY,
    Claim,
    Tables,
    cell,
    claim,
    claims_table,
    mean_sd,
    num,
    rows_where,
    runs_line,
    setup_table,
    span,
    table,
    threshold,
)
from ..configs import check, setting
from ..convergence import CONVERGED_MSE
from ..figures import (
    COLORS,
    ERROR,
    FIT_X,
    NOTHING,
    SINGLE,
    VALUE,
    ExperimentFigure,
    colour,
    converged,
    finished,
    keep,
    legend,
    placeholder,
    summarise,
)
from . import Experiment, SweepSettings

if TYPE_CHECKING:  # the job's types: torch, imported where a job runs
    import torch

    from ..experiment_jobs import Run
    from ..settings import TrainConfig
    from ..tasks import Task, TruthTable
    from ..training import TrainResult

# ----------------------------------------------------------------------------- the settings


@dataclass
class GeneralizationSettings:
    """The generalization experiment's own settings."""

    completions: int = setting(16, "random completions of the training data whose as_n is compared",
                               limit="samples")
    retrain_steps: int = setting(3000, "steps of retraining the learned table and a completion on the whole cube",
                                 limit="train_steps")

    def __post_init__(self):
        check(self)




def task_label(sweep: SweepSettings, config: TrainConfig) -> str:
    """A run's task: a random function seeded by the run's seed unless the spec names one; every run needs `train_size`."""
    if config.train_size is None:
        raise ValueError("generalization: every run needs ['train_size']")
    return sweep.task or f"random:seed={config.seed}"


# ----------------------------------------------------------------------------- the job


def completions(task: Task, n: int, train_set: torch.Tensor, count: int, seed: int) -> torch.Tensor:
    """`count` random functions that agree with `task` on the vertices `train_set` and are uniformly
    random elsewhere: `[count, 2**n]` in {0,1}, vertex order. Drawn from a stream of their own
    (`seed` hashed with "completions"), not the stream of `random:seed=<seed>` itself."""
    import torch

    from ..training import _stream_seed

    generator = torch.Generator().manual_seed(_stream_seed(seed, "completions"))
    tables = torch.randint(0, 2, (count, 2**n), generator=generator).float()
    tables[:, train_set] = task.values(n)[train_set]
    return tables


def as_n(table01: torch.Tensor) -> float:
    """as_n of a truth table in {0,1} (vertex order), on the ±1 scale."""
    from .. import cube

    return cube.analyze(2.0 * table01.double() - 1.0).avg_sensitivity


def _table_task(table01: torch.Tensor) -> TruthTable:
    from ..tasks import TruthTable

    return TruthTable(bits="".join("1" if v > 0.5 else "0" for v in table01.tolist()))


def job(experiment: str, batch: list[Run], out: Path) -> list[dict]:
    """Fit a restricted training set, read the learned function, compare it with random completions,
    then retrain the learned table and one completion on the whole cube and measure their sharpness."""
    import torch

    from ..analysis import cube_outputs
    from ..experiment_jobs import alone, save_checkpoint, train_batch, training_metrics
    from ..training import TrainingData

    n, size = batch[0].config.n, batch[0].sweep.batch_models
    fitted = train_batch(batch)

    def compare(run: Run, result: TrainResult) -> dict:
        save_checkpoint(out, run, result)
        table = run.config.encoding.decide(cube_outputs(result.model, n))  # [2**n] in {0,1}
        train_set = TrainingData(run.config).train_set
        options = completions(run.task, n, train_set, run.extra.completions, run.config.seed)
        as_options = torch.tensor([as_n(t) for t in options])
        as_learned = as_n(table)
        values = {
            **training_metrics(result),
            "heldout_accuracy": result.final.get("heldout_accuracy"),
            "fits": bool(result.final["eval_accuracy"] == 1.0),
            "as_learned": as_learned,
            "as_target": as_n(run.task.values(n)),
            "as_completion_mean": as_options.mean().item(),
            "as_completion_std": as_options.std().item() if len(as_options) > 1 else None,
            "as_completion_min": as_options.min().item(),
            "completions_more_sensitive": (as_options > as_learned).float().mean().item(),
            "as_completion_retrained": as_options[0].item(),
        }
        history = [{**record, "phase": "fit"} for record in result.history]
        return {"metrics": values, "history": history, "retrain": {"learned": table, "completion": options[0]}}

    results = [alone(compare, run, result) for run, result in zip(batch, fitted)]
    # retrain the learned table and one completion of every run that got this far on the whole cube,
    # in batches of at most batch_models
    retrain = [(k, kind, _retraining(run, table))
               for k, (run, result) in enumerate(zip(batch, results)) if "retrain" in result
               for kind, table in result.pop("retrain").items()]
    for start in range(0, len(retrain), size):
        chunk = retrain[start : start + size]
        for (k, kind, again), result in zip(chunk, train_batch([r for _, _, r in chunk])):
            results[k] = alone(_add_retrained, results[k], kind, again, result, out)
    return results


def _retraining(run: Run, table01: torch.Tensor) -> Run:
    """The run that retrains a truth table on the whole cube: a fresh model, `retrain_steps` steps."""
    config = replace(run.config, steps=run.extra.retrain_steps, train_size=None)
    model = run.model_settings.build(config.n, seed=config.seed)
    return replace(run, config=config, task=_table_task(table01), model=model)


def _add_retrained(found: dict, kind: str, again: Run, result: TrainResult, out: Path) -> dict:
    """A generalization run's result with one retrained table's checkpoint, metrics and history added."""
    from ..experiment_jobs import measure_run, save_checkpoint, training_metrics

    if "error" in found:  # the other table of this run already failed
        return found
    save_checkpoint(out, again, result, suffix=f"-{kind}")
    measured = {**training_metrics(result), **measure_run(again, result.model, again.task, again.config)}
    found["metrics"].update({f"{kind}_{key}": value for key, value in measured.items()})
    found["history"] += [{**record, "phase": f"retrain_{kind}"} for record in result.history]
    return found


# ----------------------------------------------------------------------------- the figures


def figures(runs: pd.DataFrame, history: pd.DataFrame) -> list[ExperimentFigure]:
    """as_n of the learned function beside the other fits; sharpness after retraining against as_n."""
    kept, note = keep(runs, ["train_size"], f"the training set fitted: MSE < {CONVERGED_MSE:g} on it")
    n = int(kept["n"].iloc[0]) if len(kept) and "n" in kept else None
    compare = summarise(kept, ["train_size"], {"as_learned": "learned by the transformer",
                                               "as_completion_mean": "random completions of the same data",
                                               "as_target": "the random target function"})
    fits = {"learned by the transformer": COLORS[0], "random completions of the same data": COLORS[1],
            "the random target function": COLORS[-1]}
    base = alt.Chart(compare).encode(
        x=alt.X("train_size:O", title="training inputs", axis=alt.Axis(labelAngle=0)),
        color=colour("metric", None, fits, fits, direction="vertical"),
        xOffset=alt.XOffset("metric:N", sort=list(fits)),
        tooltip=["train_size:O", "metric:N", alt.Tooltip("mean:Q", format=VALUE), alt.Tooltip("stderr:Q", format=ERROR),
                 "count:Q"],
    )
    layers = [
        base.mark_point(filled=True, size=80).encode(
            y=alt.Y("mean:Q", title="average sensitivity as_n", scale=alt.Scale(zero=True))),
        base.mark_errorbar().encode(y=alt.Y("low:Q", title="average sensitivity as_n"), y2="high:Q"),
    ]
    if n is not None:
        layers.append(alt.Chart(pd.DataFrame({"half": [n / 2]})).mark_rule(strokeDash=[4, 4], color="gray")
                      .encode(y="half:Q",
                              tooltip=[alt.Tooltip("half:Q", title="n/2 (a random function)", format="~g")]))
    compare_chart = alt.layer(*layers).properties(**SINGLE, autosize=FIT_X,
                                                  title="as_n of the learned extrapolation vs. other fits") \
        if len(compare) else placeholder(NOTHING)

    retrained = []
    for kind, as_column, label in (("learned", "as_learned", "learned"),
                                   ("completion", "as_completion_retrained", "random completion")):
        part = finished(runs)
        part = part[converged(part, f"{kind}_converged")] if f"{kind}_converged" in part else part.iloc[0:0]
        retrained.append(pd.DataFrame({
            "run_id": part["run_id"], "train_size": part["train_size"], "function": label,
            "as_n": part[as_column], "sharpness_proxy_pm1": part[f"{kind}_sharpness_proxy_pm1"],
            "sharpness_limit_pm1": part[f"{kind}_sharpness_limit_pm1"],
        }))
    points = pd.concat(retrained, ignore_index=True)
    functions = {"learned": COLORS[0], "random completion": COLORS[1]}
    total = 2 * len(finished(runs))
    retrain_note = (f"{len(points)} of {total} retrained models kept (fitted the whole cube: "
                    f"MSE < {CONVERGED_MSE:g}); the learned table of every finished run and one random completion of its data.")
    sharp_chart = (
        alt.Chart(points)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X("as_n:Q", title="average sensitivity as_n of the function"),
            y=alt.Y("sharpness_proxy_pm1:Q", title="sharpness proxy ×4 after retraining on the whole cube"),
            color=colour("function", None, functions, functions),
            shape=alt.Shape("train_size:O", title="training inputs", legend=legend()),
            tooltip=["function:N", "train_size:O", alt.Tooltip("as_n:Q", format=VALUE),
                     alt.Tooltip("sharpness_proxy_pm1:Q", format=VALUE),
                     alt.Tooltip("sharpness_limit_pm1:Q", format=VALUE)],
        )
        .properties(**SINGLE, autosize=FIT_X, title="Sharper minima for more sensitive functions")
    ) if len(points) else placeholder(NOTHING)
    return [
        ExperimentFigure(
            key="generalization",
            title="Generalization: the sensitivity of what is learned",
            explanation=(
                "The paper: trained on a few fixed inputs of a random function, a transformer extrapolates to "
                "the rest of the cube with a function of clearly lower average sensitivity than random "
                "completions of the same data (a random function has as_n ≈ n/2, the dashed line), lowest with "
                "the fewest training inputs. The learned table is read off the model on every input (thresholded "
                "at 0.5); the completions agree with the data and are uniformly random elsewhere (seeded)."
            ),
            chart=compare_chart, data=compare, note=note,
        ),
        ExperimentFigure(
            key="generalization_sharpness",
            title="Generalization: sharpness against sensitivity",
            explanation=(
                "The paper: retrained on the whole cube, functions of higher average sensitivity sit in sharper "
                "minima. Each learned table and one random completion per run is trained from scratch on all "
                "inputs, then measured with the paper's proxy (×4)."
            ),
            chart=sharp_chart, data=points, note=retrain_note,
        ),
    ]


# ----------------------------------------------------------------------------- the fidelity page


def retrained_points(done: pd.DataFrame) -> pd.DataFrame:
    """One row per kept retrained model: its run (the function and training set), kind (learned or
    completion), as_n and sharpness proxy ×4."""
    return pd.concat([
        pd.DataFrame({"run_id": part["run_id"], "kind": kind, "as_n": part[as_column],
                      "sharpness": part[f"{kind}_sharpness_proxy_pm1"]})
        for kind, as_column in (("learned", "as_learned"), ("completion", "as_completion_retrained"))
        if f"{kind}_converged" in done
        for part in [done[done[f"{kind}_converged"].fillna(False).astype(bool)]]
    ] or [pd.DataFrame(columns=["run_id", "kind", "as_n", "sharpness"])], ignore_index=True)


def _claims(t: Tables, sizes: list, points: pd.DataFrame) -> list[Claim]:
    """G1 and G2 (the smallest and the largest training set), G3 the trend over sizes, G4 the correlation
    over the retrained models (secondaries: within learned and completions, pooled, with intervals
    clustered by function), G5 the paired sharpness difference; each with its survivors."""
    kept, done = t.kept(), t.finished()
    fitted = t.survivors(done, ["train_size"], "converged")
    retrained = "; ".join(f"{name} retrained: {t.survivors(done, ['train_size'], f'{kind}_converged')}"
                          for kind, name in (("learned", "learned functions"), ("completion", "completions"))
                          if f"{kind}_converged" in done)
    claims = []
    for key, size in zip(("G1", "G2"), (sizes[:1] + sizes[-1:]) if len(sizes) > 1 else sizes):
        rows = rows_where(kept, train_size=size)
        claims.append(claim("generalization", f"The learned function is less sensitive than random completions "
                                              f"({'fewest' if key == 'G1' else 'most'} training inputs: {num(size)})",
                            "as_n learned − mean as_n of the completions, per function", -1,
                            lambda rows=rows: stats.mean(rows["as_learned"] - rows["as_completion_mean"], "functions"),
                            key=key, survivors=t.survivors(rows_where(done, train_size=size), ["train_size"])))

    def trend(error):
        return stats.slope(np.log2(kept["train_size"]), kept["as_learned"], "functions per size", error=error)

    claims.append(claim("generalization", "… least sensitive with the fewest training inputs",
                        "slope of the learned as_n in log2(training inputs)", +1, lambda: trend("classical"), key="G3",
                        survivors=fitted, secondaries={"HC3 errors": lambda: trend("HC3")}))
    claims.append(claim("generalization", "More sensitive functions sit in sharper minima",
                        f"correlation of as_n with the {PROXY} over the retrained models", +1,
                        lambda: stats.correlation(points["as_n"], points["sharpness"]), key="G4", survivors=retrained,
                        secondaries={
                            "clustered by function": lambda: stats.clustered_correlation(
                                points["as_n"], points["sharpness"], points["run_id"], unit="functions"),
                            "within learned and completions, clustered by function": lambda: stats.clustered_correlation(
                                points["as_n"], points["sharpness"], points["run_id"], points["kind"], unit="functions")}))
    both = points.pivot_table(index="run_id", columns="kind", values="sharpness").dropna()
    claims.append(claim("generalization", "… a completion's minimum is sharper than the learned function's",
                        f"{PROXY}, completion − learned, per function and training set", +1,
                        lambda: stats.mean(both["completion"] - both["learned"], "runs"), key="G5", survivors=retrained))
    return claims


def _within(points: pd.DataFrame) -> str:
    """G4 inside each kind of retrained model (one point per function: no clustering needed)."""
    rows = [[kind, int((points["kind"] == kind).sum()),
             cell(lambda kind=kind: stats.correlation(*(points[points["kind"] == kind][c]
                                                        for c in ("as_n", "sharpness"))))]
            for kind in ("learned", "completion")]
    rows.append(["pooled within both (centred per kind), clustered by function", len(points),
                 cell(lambda: stats.clustered_correlation(points["as_n"], points["sharpness"], points["run_id"],
                                                          points["kind"], unit="functions"))])
    rows.append(["pooled (G4's primary)", len(points),
                 cell(lambda: stats.correlation(points["as_n"], points["sharpness"]))])
    return ("G4 within each kind of retrained model: the pooled correlation includes the gap between the two kinds "
            "(completions are more sensitive and sharper), so the correlation inside each kind is the stricter test "
            "(Pearson's r, Fisher z; the pooled rows' intervals by the delete-one-function jackknife):\n\n"
            + table(["models", "points", "r [95 %]"], rows))


def section(t: Tables) -> tuple[str, list[Claim]]:
    """Section 5 of the fidelity page: the learned function's sensitivity and the retrained minima (G1, ...)."""
    kept = t.kept()
    sizes = sorted(kept["train_size"].unique()) if len(kept) else []
    n = int(kept["n"].iloc[0]) if len(kept) else None
    done = t.finished()
    points = retrained_points(done)
    claims = _claims(t, sizes, points)
    rows = []
    for size in sizes:
        r = rows_where(kept, train_size=size)
        ids = set(r["run_id"])
        learned, completion = (points[(points["kind"] == k) & points["run_id"].isin(ids)]["sharpness"]
                               for k in ("learned", "completion"))
        rows.append([num(size), num(size / 2**n, False) if n else "—", mean_sd(r["as_learned"]),
                     mean_sd(r["as_completion_mean"]), mean_sd(r["as_target"]),
                     num(r["completions_more_sensitive"].mean()), mean_sd(learned), mean_sd(completion),
                     span(r["heldout_accuracy"])])
    retrained = (f"{len(points)} of {2 * len(done)} retrained models fitted the whole cube and are kept "
                 f"(learned: {int((points['kind'] == 'learned').sum())}, completions: "
                 f"{int((points['kind'] == 'completion').sum())})")
    missed = [f"the {kind} of training inputs = {num(r['train_size'])}, seed = {num(r['seed'])} (final MSE "
              f"{num(r.get(f'{kind}_eval_loss'))})"
              for kind in ("learned", "completion") if f"{kind}_converged" in done
              for _, r in done[~done[f"{kind}_converged"].fillna(False).astype(bool)].iterrows()]
    retrained += f"; dropped: {', '.join(missed)}." if missed else "."
    text = [
        "## 5. Generalization (Fig. 4, 15)",
        "**The paper:** trained on a few fixed inputs of a random function, a transformer extrapolates with a "
        "function of clearly lower average sensitivity than random completions of the same data (a random function "
        "has as_n ≈ n/2), lowest with the fewest inputs; retrained on the whole cube, more sensitive functions sit "
        "in sharper minima.",
        setup_table(t),
        runs_line(t, ["train_size"], rule=f"the training set fitted: MSE < {num(threshold(t.runs), False)} on it") + " "
        + retrained,
        f"Per training-set size (n = {num(n)}, n/2 = {num(n / 2, False) if n else '—'}; means ± standard deviations "
        "over the functions; the sharpness columns over the kept retrained models):",
        table(["training inputs", "fraction of the cube", "as_n learned", "as_n of the completions (mean)",
               "as_n of the target", "fraction of completions more sensitive", f"{PROXY} retrained: learned",
               "completion", "held-out accuracy"], rows),
        f"Held-out accuracy (on the inputs outside the training set) is {span(kept['heldout_accuracy'])}: the "
        "extrapolation is simple, not correct, as in the paper." if "heldout_accuracy" in kept else "",
        claims_table(claims),
        _within(points),
    ]
    return "\n\n".join(text), claims


# ----------------------------------------------------------------------------- the registration

EXPERIMENT = Experiment(
    "generalization", 5, job, ("seed",), figures, (section,),
    {"lr": 3e-3, "steps": 3000, "eval_interval": 100, "target_accuracy": 1.0, "target_loss": CONVERGED_MSE},
    GeneralizationSettings, task_label)
