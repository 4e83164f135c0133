"""Training: AdamW on fresh uniform bit strings every step, with callbacks for everything else.

The paper's setup (paper/experiments.md): minimise the empirical risk

    L(theta) = E_{x ~ U({0,1}^n)} loss(T_theta(x), f(x))

with AdamW (lr 3e-4, weight decay 0.1, batch 1024, no schedule, no clipping), drawing a fresh batch
of uniform strings at every step (online learning); loss MSE on {0,1} targets (or ±1 targets, or
binary cross-entropy on logits, `sensviz.losses`). Options: mixed lengths (one length per step,
cycling through `min_n..n`), a restricted training set (a fixed seeded subset of the cube of a given
size, sampled with replacement — the paper's generalization experiment), full-batch training
(`full_batch`: every string of the cube, or of the restricted set, at every step), evaluation every
`eval_interval` steps, early stopping at a target accuracy and/or loss (the paper counts a run as
converged at evaluation MSE < 0.001), or, with `relax_steps`, stopping that many steps after the
targets are first met (so that every converged run relaxes in its minimum for equally long; the
step at which they were first met is `TrainResult.converged_step`, seen at the resolution of
`eval_interval`). One definition serves both: the targets are met at an evaluation whose accuracy is at
least `target_accuracy` and whose loss is below `target_loss` (strictly, as the paper's filter keeps a run at
evaluation MSE < 0.001), so a run with the filter as its targets relaxes from the first evaluation the filter
would keep.

`train(model, task, config, callbacks)` trains one model in place. `train_many(models, tasks,
configs, callbacks)` trains K models of one architecture at once: their parameters stacked
(`torch.func.stack_module_state`), one forward and backward for all of them
(`torch.func.functional_call` under `torch.func.vmap`), and a stacked AdamW with a learning rate
and weight decay per model; each model gets exactly the data stream its own `train` run would,
so both give the same weights up to float rounding (tested). Each model may also stop by its own
rule (`PER_MEMBER_STOPPING`: its steps, targets and relaxation), so the arms of one seed (a fixed
budget and a relaxation after convergence) train as two members of one run: the same initialisation
and data go through the same kernels in one process, so their numbers are the same, bit for bit,
until one of them stops (tested). Two runs of one seed in separate jobs need not be: the vmapped
kernels' rounding depends on the number of models in the job and on the CPU's instruction set, and
PARITY's training amplifies a last-bit difference (`docs/pairing.md`).

The loop knows nothing of the UI: `Callback`s see every step and every evaluation, and may ask a
run to stop (the result keeps the weights learned so far). A one-model run's callback may take a
snapshot after a step (`RunState.snapshot`, `sensviz.snapshots`): `train(..., resume=snapshot)` in
another process goes on from it exactly as the run would have (a server restart costs no steps).
A non-finite loss ends the run with the reason in `stop_reason` and the last weights that gave a
finite loss. Same model, task, config: same run, bit for bit on a CPU. Randomness: the data stream
is seeded by `seed` (and the restricted set by `train_set_seed`), the evaluation sample by
`eval_seed`; the model's initialisation is the caller's (`build_model(..., seed=...)`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import torch
from torch import nn

from . import cube
from .base import TracedModel
from .checkpoints import save_checkpoint
from .files import write_atomic
from .losses import loss_value
from .settings import PER_MEMBER_STOPPING, PER_MODEL_FIELDS, TrainConfig  # noqa: F401  (defined torch-free, re-exported)
from .snapshots import Snapshot
from .tasks import TargetEncoding, Task, get_task

HISTORY_METADATA_CAP = 64 * 1024
"""Largest history (JSON bytes) kept in a checkpoint's metadata; above it, a side file."""

_EVAL_CHUNK = 2048


def _stream_seed(seed: int, stream: str) -> int:
    """A seed for one named random stream of a run, so that streams are not correlated."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{stream}".encode()).digest()[:8], "little") >> 1


class TrainingData:
    """The strings one run trains on and is evaluated on, all drawn from seeded generators.

    `batch(n)`: fresh uniform strings (or, with a restricted set, uniform draws with replacement
    from it), `[batch_size, n]` int64 on the CPU; with `full_batch`, every string of the cube (or of
    the restricted set) once, the same batch every step. `eval_sets`: name -> strings per length.
    """

    def __init__(self, config: TrainConfig):
        self.config = config
        self.generator = torch.Generator().manual_seed(_stream_seed(config.seed, "data"))
        self.train_set = self.heldout = None
        if config.train_size is not None:
            subset_seed = config.seed if config.train_set_seed is None else config.train_set_seed
            order = torch.randperm(2**config.n, generator=torch.Generator().manual_seed(_stream_seed(subset_seed, "subset")))
            self.train_set = order[: config.train_size]  # vertex indices
            self.heldout = order[config.train_size : config.train_size + config.eval_size]

    def batch(self, n: int) -> torch.Tensor:
        size = self.config.batch_size
        if self.config.full_batch:
            return cube.vertices(n) if self.train_set is None else cube.vertex_bits(self.train_set, n)
        if self.train_set is not None:
            picks = torch.randint(len(self.train_set), (size,), generator=self.generator)
            return cube.vertex_bits(self.train_set[picks], n)
        return torch.randint(0, 2, (size, n), generator=self.generator)

    def eval_sets(self) -> dict[str, list[torch.Tensor]]:
        """`eval`: per length the whole cube (2**n <= eval_size) or a fixed sample; with a restricted set,
        the whole set (train_size <= eval_size) or its first eval_size strings (a uniform sample: the set is a
        random order's start); `heldout` (restricted runs with strings left over): the rest of the cube, at
        most eval_size. An evaluation costs at most eval_size strings per length, whatever the training set."""
        c = self.config
        if self.train_set is not None:
            sets = {"eval": [cube.vertex_bits(self.train_set[: c.eval_size], c.n)]}
            if len(self.heldout):
                sets["heldout"] = [cube.vertex_bits(self.heldout, c.n)]
            return sets
        generator = torch.Generator().manual_seed(_stream_seed(c.eval_seed, "eval"))
        return {
            "eval": [
                cube.vertices(n) if 2**n <= c.eval_size else torch.randint(0, 2, (c.eval_size, n), generator=generator)
                for n in c.lengths
            ]
        }


class RunState:
    """What a callback sees of a run: the step, the last training loss, the history, the model.

    `step` counts the optimizer steps done; `loss` is the training loss of the last step (at the
    weights before its update) and `n` its input length; `member` is the model's index in a
    `train_many` run (0 for `train`). `model` holds the current weights: read it, do not modify it.
    """

    def __init__(self, learner, member: int, config: TrainConfig, task: Task):
        self._learner = learner
        self.member = member
        self.config = config
        self.task = task
        self.step = 0
        self.total_steps = config.steps  # the steps the run may take (`step` counts those done)
        self.n = config.n
        self.loss: float | None = None
        self.history: list[dict] = []
        self.started = time.perf_counter()
        self._snapshot = None  # set by the loop of a one-model run

    @property
    def model(self) -> TracedModel:
        return self._learner.model(self.member)

    def snapshot(self) -> Snapshot:
        """Where the run stands after this step (`sensviz.snapshots`): `train(..., resume=)` goes on from it exactly.
        In `on_step` of a one-model run (`train`); ValueError elsewhere."""
        if self._snapshot is None:
            raise ValueError("a snapshot is taken in on_step of a one-model run (train, not train_many)")
        return self._snapshot()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started


class Callback:
    """Hooks of the training loop; subclass and override what you need.

    Called in this order: `on_start` once, then `on_eval` after every evaluation (step 0, every
    `eval_interval` steps, the last step, and once more for weights restored or stopped between
    evaluations), `on_step` after every step (before that step's evaluation), then `should_stop`
    (True ends this model's run with "stopped by callback"); `on_end` once with the result.
    """

    def on_start(self, state: RunState) -> None:
        pass

    def on_step(self, state: RunState) -> None:
        pass

    def on_eval(self, state: RunState, record: dict) -> None:
        pass

    def should_stop(self, state: RunState) -> bool:
        return False

    def on_end(self, state: RunState, result: TrainResult) -> None:
        pass


class PrintProgress(Callback):
    """Prints one line per evaluation (to stderr by default): step, losses, accuracy, time."""

    def __init__(self, prefix: str = "", stream=None):
        self.prefix = prefix
        self.stream = stream

    def on_eval(self, state, record):
        parts = [f"{self.prefix}{state.task.label} step {record['step']:>6}/{state.total_steps}"]
        for key in ("train_loss", "eval_loss", "eval_accuracy", "heldout_accuracy"):
            if record.get(key) is not None:
                parts.append(f"{key} {record[key]:.4g}")
        parts.append(f"{state.elapsed:.1f}s")
        print("  ".join(parts), file=self.stream or sys.stderr, flush=True)


@dataclass
class TrainResult:
    """A finished run: the model (trained in place) and how it went."""

    model: TracedModel
    task: Task
    config: TrainConfig
    history: list[dict]  # one record per evaluation: step, train_loss, eval_loss, eval_accuracy, param_norm, ...
    stop_reason: str  # "completed", "early_stop", "relaxed", "stopped by callback", "diverged: ..." or "learned nothing: ..."
    steps: int  # optimizer steps applied to the returned weights
    wall_time: float  # seconds
    converged_step: int | None = None  # the first evaluation at which the early-stopping targets were met

    @property
    def final(self) -> dict:
        """The last evaluation record, which is always of the returned weights."""
        return self.history[-1]

    def frame(self):
        """The history as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.history)

    def summary(self, with_history: bool = False, with_time: bool = True) -> dict:
        """JSON-compatible: config, task, stop_reason, steps, wall time, final metrics (and the history)."""
        out = {
            "trainer": "sensviz.training",
            "torch": torch.__version__,
            "task": self.task.label,
            "config": self.config.to_dict(),
            "stop_reason": self.stop_reason,
            "steps": self.steps,
            "converged_step": self.converged_step,
            "final": self.final,
            "final_accuracy": self.final.get("eval_accuracy"),
        }
        if with_time:
            out["wall_time_s"] = round(self.wall_time, 3)
        if with_history:
            out["history"] = self.history
        return out

    def save(self, path, extra: dict | None = None, with_time: bool = True) -> Path:
        """Write a sensviz checkpoint whose `training` metadata holds the summary and the history.

        A history over `HISTORY_METADATA_CAP` bytes of JSON goes to `<path>.history.json` beside the
        checkpoint instead, named (with its sha256) in the metadata. `with_time=False` leaves out
        the wall time, so that the same run always writes the same bytes.
        """
        path = Path(path)
        training = self.summary(with_history=True, with_time=with_time)
        text = json.dumps(training.pop("history"))
        if len(text) <= HISTORY_METADATA_CAP:
            training["history"] = json.loads(text)
        else:
            side = path.with_name(path.name + ".history.json")
            write_atomic(side, text.encode())
            training["history_file"] = {"name": side.name, "sha256": hashlib.sha256(text.encode()).hexdigest()}
        return save_checkpoint(
            self.model, path, task=self.task, n=self.config.n, encoding=self.config.encoding, training=training, extra=extra
        )


# --- learners: how K models take a step -------------------------------------------------------


def adamw(params, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """The trainer's optimizer for one model: `torch.optim.AdamW`, fused (one kernel over every parameter:
    0.15 ms a step for the class's d = 32 model on one CPU thread, 0.8 ms one tensor at a time)."""
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)


class _SingleLearner:
    """One model, trained in place with the fused AdamW (`adamw`)."""

    size = 1

    def __init__(self, model: TracedModel, config: TrainConfig):
        self._model = model
        self._params = list(model.parameters())
        self._optimizer = adamw(self._params, config.lr, config.weight_decay)
        self._good = [p.detach().clone() for p in self._params]
        self._loss = config.loss

    def step(self, bits, targets, active) -> torch.Tensor:
        output = self._model.training_outputs(bits[0])
        loss = loss_value(output.reshape(-1), targets[0].reshape(-1), self._loss)
        if not torch.isfinite(loss):
            self.restore(0)
        else:
            with torch.no_grad():
                for good, p in zip(self._good, self._params):
                    good.copy_(p)
            self._optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self._optimizer.step()
        return loss.detach().view(1)

    @torch.no_grad()
    def restore(self, member: int) -> None:
        for p, good in zip(self._params, self._good):
            p.copy_(good)

    @torch.no_grad()
    def outputs(self, bits) -> torch.Tensor:
        return torch.cat([self._model.training_outputs(chunk) for chunk in bits[0].split(_EVAL_CHUNK)]).unsqueeze(0)

    def model(self, member: int) -> TracedModel:
        return self._model

    def finish(self) -> None:
        self._optimizer.zero_grad(set_to_none=True)

    def state(self) -> tuple[dict, list[torch.Tensor]]:
        """Copies of the optimizer's state and of the weights before the last step."""
        return copy.deepcopy(self._optimizer.state_dict()), [good.detach().clone() for good in self._good]

    @torch.no_grad()
    def load(self, weights: dict[str, torch.Tensor], optimizer: dict, before: list[torch.Tensor]) -> None:
        """Weights, optimizer state and the weights before the last step, as `state` (and the model's state_dict) gave them."""
        self._model.load_state_dict(weights)
        self._optimizer.load_state_dict(optimizer)
        if len(before) != len(self._good):
            raise ValueError(f"the snapshot has {len(before)} tensors of earlier weights; the model has {len(self._good)}")
        for good, value in zip(self._good, before):
            good.copy_(value)


class _TrainingView(nn.Module):
    """`training_outputs` as a module's forward, for `torch.func.functional_call`."""

    def __init__(self, model: TracedModel):
        super().__init__()
        self.model = model

    def forward(self, bits):
        return self.model.training_outputs(bits)


class StackedAdamW:
    """AdamW over parameters stacked along a leading model axis, with a learning rate and weight
    decay per model: per element exactly `torch.optim.AdamW` (decoupled decay, bias correction).

    `step(update)` changes only the models whose entry in `update[K]` is True.
    """

    def __init__(self, params: dict[str, torch.Tensor], lr: Sequence[float], weight_decay: Sequence[float],
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        device = next(iter(params.values())).device
        self.params = params
        self.lr = torch.tensor(lr, dtype=torch.float32, device=device)  # [K]
        self.weight_decay = torch.tensor(weight_decay, dtype=torch.float32, device=device)  # [K]
        self.betas, self.eps, self.t = betas, eps, 0
        self.exp_avg = {k: torch.zeros_like(p) for k, p in params.items()}
        self.exp_avg_sq = {k: torch.zeros_like(p) for k, p in params.items()}

    @torch.no_grad()
    def step(self, update: torch.Tensor) -> None:
        self.t += 1
        beta1, beta2 = self.betas
        bias1, bias2_sqrt = 1 - beta1**self.t, math.sqrt(1 - beta2**self.t)
        for name, p in self.params.items():
            shape = (-1,) + (1,) * (p.dim() - 1)  # broadcast [K] over the parameter's own axes
            lr, decay = self.lr.view(shape), self.weight_decay.view(shape)
            m, v = self.exp_avg[name], self.exp_avg_sq[name]
            m.lerp_(p.grad, 1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            new = p * (1 - lr * decay) - (lr / bias1) * m / (v.sqrt() / bias2_sqrt + self.eps)
            p.copy_(torch.where(update.view(shape), new, p))


class _StackedLearner:
    """K models of one architecture and config, stacked and run under `torch.func.vmap`."""

    def __init__(self, models: Sequence[TracedModel], configs: Sequence[TrainConfig]):
        self._models = list(models)
        self.size = len(models)
        params, buffers = torch.func.stack_module_state(self._models)  # name -> [K, ...], leaves with grad
        self._params = {"model." + k: v for k, v in params.items()}
        self._buffers = {"model." + k: v for k, v in buffers.items()}
        self._view = _TrainingView(copy.deepcopy(self._models[0]))
        self._optimizer = StackedAdamW(self._params, [c.lr for c in configs], [c.weight_decay for c in configs])
        self._good = {k: v.detach().clone() for k, v in self._params.items()}
        self._loss = configs[0].loss
        self._batched_loss = torch.func.vmap(self._member_loss)
        self._batched_outputs = torch.func.vmap(self._member_outputs)

    def _member_outputs(self, params, buffers, bits):
        return torch.func.functional_call(self._view, (params, buffers), (bits,))

    def _member_loss(self, params, buffers, bits, targets):
        output = self._member_outputs(params, buffers, bits)
        return loss_value(output.reshape(-1), targets.reshape(-1), self._loss)

    def step(self, bits, targets, active) -> torch.Tensor:
        losses = self._batched_loss(self._params, self._buffers, bits, targets)  # [K]
        finite = torch.isfinite(losses.detach())
        with torch.no_grad():
            for name, p in self._params.items():
                self._good[name][finite] = p[finite]
        for p in self._params.values():
            p.grad = None
        torch.where(finite, losses, torch.zeros_like(losses)).sum().backward()
        self._optimizer.step(active.to(finite.device) & finite)
        for member in (~finite).nonzero().flatten().tolist():
            self.restore(member)
        return losses.detach()

    @torch.no_grad()
    def restore(self, member: int) -> None:
        for name, p in self._params.items():
            p[member] = self._good[name][member]

    @torch.no_grad()
    def outputs(self, bits) -> torch.Tensor:
        parts = [self._batched_outputs(self._params, self._buffers, chunk) for chunk in bits.split(_EVAL_CHUNK, dim=1)]
        return torch.cat(parts, dim=1)

    @torch.no_grad()
    def model(self, member: int) -> TracedModel:
        """The member's model object, holding its current weights."""
        model = self._models[member]
        for name, p in model.named_parameters():
            p.copy_(self._params["model." + name][member])
        return model

    def finish(self) -> None:
        for member in range(self.size):
            self.model(member)


# --- the loop ----------------------------------------------------------------------------------


def scores(outputs: torch.Tensor, values: torch.Tensor, encoding: TargetEncoding, loss: str) -> tuple[float, float]:
    """(loss, accuracy) of training outputs against task values in [0,1] of the same shape.

    The accuracy, `decide(output) == value`, means something only for Boolean tasks.
    """
    out, values = outputs.reshape(-1).float(), values.reshape(-1).to(outputs.device)
    return loss_value(out, encoding.encode(values), loss).item(), (encoding.decide(out) == values).float().mean().item()


@torch.no_grad()
def evaluate(model: TracedModel, task: Task | str, bits: torch.Tensor, encoding: TargetEncoding, loss: str = "mse") -> dict:
    """`loss` and (Boolean tasks) `accuracy` of the model's training outputs on `bits[batch, n]`."""
    task = get_task(task)
    outputs = torch.cat([model.training_outputs(chunk.to(model.device)) for chunk in bits.split(_EVAL_CHUNK)])
    value, accuracy = scores(outputs, model.training_values(task, bits), encoding, loss)
    return {"loss": value, "accuracy": accuracy if task.boolean else None}


def _evaluate(learner, template: TracedModel, tasks, encoding, loss, eval_sets, device) -> list[dict]:
    """Per member: `{name}_loss` and (Boolean tasks) `{name}_accuracy`, averaged over lengths."""
    records = [{} for _ in tasks]
    for name, per_length in eval_sets.items():
        totals = torch.zeros(len(tasks), 2, dtype=torch.float64)  # [K, (loss, accuracy)]
        for bits in per_length:  # [K, E, n]
            outputs = learner.outputs(bits.to(device))  # [K, E, ...]
            for k, task in enumerate(tasks):
                totals[k] += torch.tensor(scores(outputs[k], template.training_values(task, bits[k]), encoding, loss))
        totals /= len(per_length)
        for k, task in enumerate(tasks):
            records[k][f"{name}_loss"] = totals[k, 0].item()
            records[k][f"{name}_accuracy"] = totals[k, 1].item() if task.boolean else None
    return records


def constant_loss(values: torch.Tensor, encoding: TargetEncoding, loss: str) -> float:
    """The loss of the best constant prediction of task values in [0,1]: what a model that learned
    nothing about its inputs reaches (MSE: the variance of the targets; BCE: their entropy)."""
    targets = encoding.encode(values.reshape(-1).double())
    if loss == "mse":
        return targets.var(unbiased=False).item()
    p = values.double().mean().clamp(1e-12, 1 - 1e-12)
    return -(p * p.log() + (1 - p) * (1 - p).log()).item()


NO_LEARNING_MARGIN = 0.99
"""A completed run whose final evaluation loss is above this fraction of `constant_loss` learned nothing."""


def _learned_nothing(template: TracedModel, task: Task, config: TrainConfig, eval_bits: list[torch.Tensor],
                     final: dict) -> str | None:
    """The stop reason of a completed run that did no better than a constant prediction, else None."""
    values = torch.cat([template.training_values(task, bits).reshape(-1) for bits in eval_bits])
    baseline = constant_loss(values, config.encoding, config.loss)
    if final["eval_loss"] < NO_LEARNING_MARGIN * baseline:
        return None
    return (f"learned nothing: the final evaluation loss {final['eval_loss']:.4g} is no better than a constant "
            f"prediction's {baseline:.4g} (try a smaller learning rate or more steps)")


def _targets_reached(config: TrainConfig, record: dict) -> bool:
    """Every early-stopping target of the config is met by this evaluation (False if there is none)."""
    met = []
    if config.target_accuracy is not None:
        met.append(record["eval_accuracy"] >= config.target_accuracy)
    if config.target_loss is not None:
        met.append(record["eval_loss"] < config.target_loss)
    return bool(met) and all(met)


@dataclass
class _Member:
    """One model of a run as the training loop tracks it: what callbacks see (`state`), its data,
    why it stopped (None while it trains), the optimizer steps in its current weights (`done`),
    the step its early-stopping targets were first met, and the training losses since the last
    evaluation."""

    state: RunState
    data: TrainingData
    eval_sets: dict[str, list[torch.Tensor]]
    reason: str | None = None
    converged: int | None = None
    done: int = 0
    window: list[float] = field(default_factory=list)

    def stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason


class _Loop:
    """One training run of K members (one model, or K stacked): the paper's loop, step by step.

    Every member sees its own batches (`TrainingData`) and stops by its own rule — its steps, its
    early-stopping targets (`early_stop`, or `relaxed` `relax_steps` after they were first met), a
    non-finite loss (`diverged`, weights restored) or a callback — while the others go on. Each member
    is evaluated at step 0, every `eval_interval` steps, at its last step and on its relaxed weights."""

    def __init__(self, learner, models, tasks, configs, callbacks, resume: Snapshot | None = None):
        self.learner, self.models, self.tasks, self.configs, self.callbacks = learner, models, tasks, configs, callbacks
        self.config = configs[0]  # the fields all members share
        self.template = models[0]
        self.resume = resume
        self.members = []
        for k, (c, t) in enumerate(zip(configs, tasks)):
            data = TrainingData(c)
            self.members.append(_Member(RunState(learner, k, c, t), data, data.eval_sets()))
        if isinstance(learner, _SingleLearner):
            m = self.members[0]
            m.state._snapshot = lambda: self.snapshot(m)
            if resume is not None:
                self.restore(m, resume)
        first = self.members[0].eval_sets
        self.eval_sets = {name: [torch.stack([m.eval_sets[name][i] for m in self.members]) for i in range(len(sets))]
                          for name, sets in first.items()}  # name -> per length [K, E, n]

    def snapshot(self, m: _Member) -> Snapshot:
        """Member `m` of a one-model run after its current step, before the evaluations due after it."""
        optimizer, before = self.learner.state()
        state = m.state
        weights = {name: value.detach().clone() for name, value in self.learner.model(0).state_dict().items()}
        return Snapshot(step=m.done, n=state.n, loss=state.loss, config=state.config.to_dict(), weights=weights,
                        optimizer=optimizer, before=before, generator=m.data.generator.get_state(),
                        history=copy.deepcopy(state.history), window=list(m.window), converged=m.converged,
                        seconds=state.elapsed)

    def restore(self, m: _Member, snap: Snapshot) -> None:
        """Member `m` where `snap` left it (ValueError when it is another run's: other settings or shapes)."""
        if snap.config != m.state.config.to_dict():
            differ = sorted(k for k in {**snap.config, **m.state.config.to_dict()}
                            if snap.config.get(k) != m.state.config.to_dict().get(k))
            raise ValueError(f"the snapshot is of a run with other settings ({', '.join(differ)})")
        if not 0 < snap.step <= m.state.config.steps:
            raise ValueError(f"the snapshot's step {snap.step} is not within the run's 1..{m.state.config.steps}")
        try:
            self.learner.load(snap.weights, snap.optimizer, snap.before)
            m.data.generator.set_state(snap.generator)
        except (RuntimeError, KeyError, TypeError) as err:
            raise ValueError(f"the snapshot does not fit this model ({type(err).__name__})") from None
        m.done, m.window, m.converged = snap.step, list(snap.window), snap.converged
        state = m.state
        state.step, state.n, state.loss, state.history = snap.step, snap.n, snap.loss, copy.deepcopy(snap.history)
        state.started = time.perf_counter() - snap.seconds

    def run(self) -> list[TrainResult]:
        if self.resume is None:
            for m in self.members:
                for cb in self.callbacks:
                    cb.on_start(m.state)
            self.evaluate(self.members)
            first = 1
        else:  # the snapshot was taken after its step's training, before that step's evaluations
            first = self.resume.step + 1
            self.after_step(self.resume.step, self.members)
        for step in range(first, max(c.steps for c in self.configs) + 1):
            active = [m for m in self.members if self.running(m)]
            if not active:
                break
            self.train_step(step, active)
            self.after_step(step, active)
        stale = [m for m in self.members if m.state.history[-1]["step"] != m.done]
        if stale:
            self.evaluate(stale)  # the returned weights always have a final record
        self.learner.finish()
        return [self.result(m) for m in self.members]

    def running(self, m: _Member) -> bool:
        return m.reason is None and m.done < m.state.config.steps  # each member stops at its own steps

    def relaxed(self, m: _Member) -> bool:
        own = m.state.config
        return own.relax_steps is not None and m.converged is not None and m.done >= m.converged + own.relax_steps

    def evaluate(self, chosen: list[_Member]) -> None:
        metrics = _evaluate(self.learner, self.template, self.tasks, self.config.encoding, self.config.loss,
                            self.eval_sets, self.template.device)
        for m in chosen:
            self.record(m, metrics[m.state.member])

    def record(self, m: _Member, metrics: dict) -> None:
        """A member's evaluation: restored and stopped when its loss is not finite, else recorded, shown to the
        callbacks and checked against its targets."""
        k = m.state.member
        record = {"step": m.done, "train_loss": sum(m.window) / len(m.window) if m.window else None, **metrics,
                  "param_norm": self.learner.model(k).param_norm()}
        m.window.clear()
        if not math.isfinite(record["eval_loss"]) and m.reason is None and m.done > 0:
            self.learner.restore(k)
            m.done -= 1
            m.stop(f"diverged: non-finite evaluation loss after step {m.done + 1}; "
                   f"weights restored to those after step {m.done}, the last with a finite loss")
            return
        m.state.history.append(record)
        for cb in self.callbacks:
            cb.on_eval(m.state, record)
        own = m.state.config
        if m.reason is None and m.converged is None and _targets_reached(own, record):
            m.converged = m.done
            if own.relax_steps is None:
                m.stop("early_stop")

    def train_step(self, step: int, active: list[_Member]) -> None:
        """One optimizer step of every running member on a fresh batch of this step's length."""
        lengths = self.config.lengths
        n = lengths[(step - 1) % len(lengths)]
        bits = torch.stack([m.data.batch(n) for m in self.members])  # [K, batch, n]
        values = torch.stack([self.template.training_values(t, bits[k]) for k, t in enumerate(self.tasks)])
        mask = torch.tensor([self.running(m) for m in self.members])
        device = self.template.device
        losses = self.learner.step(bits.to(device), self.config.encoding.encode(values).to(device), mask).tolist()
        for m in active:
            loss = losses[m.state.member]
            if not math.isfinite(loss):  # at the weights after step-1; the last finite loss was one step earlier
                m.done = max(step - 2, 0)
                m.stop(f"diverged: non-finite training loss ({loss}) at step {step}; "
                       f"weights restored to those after step {m.done}, the last with a finite loss")
                continue
            m.done = step
            m.window.append(loss)
            m.state.step, m.state.n, m.state.loss = step, n, loss
            for cb in self.callbacks:
                cb.on_step(m.state)

    def after_step(self, step: int, active: list[_Member]) -> None:
        """The evaluations due after a step (every eval_interval steps, at a member's last step, and the relaxed
        weights' own record), then the stops: relaxed members, and any a callback asks for."""
        ending = [m for m in active if m.reason is None and self.relaxed(m)]
        due = [m for m in active if m.reason is None
               and (step % self.config.eval_interval == 0 or step == m.state.config.steps or self.relaxed(m))]
        if due:
            self.evaluate(due)
        for m in ending:
            m.stop("relaxed")
        for m in self.members:
            if self.running(m) and any(cb.should_stop(m.state) for cb in self.callbacks):
                m.stop("stopped by callback")

    def result(self, m: _Member) -> TrainResult:
        k = m.state.member
        model, task, c = self.models[k], self.tasks[k], self.configs[k]
        if m.reason is None:
            m.reason = _learned_nothing(self.template, task, c, m.eval_sets["eval"], m.state.history[-1])
        result = TrainResult(model=model, task=task, config=c, history=m.state.history,
                             stop_reason=m.reason or "completed", steps=m.done, wall_time=m.state.elapsed,
                             converged_step=m.converged)
        for cb in self.callbacks:
            cb.on_end(m.state, result)
        return result


def _run(learner, models, tasks, configs, callbacks, resume: Snapshot | None = None) -> list[TrainResult]:
    """Train the members of one run to their ends (`_Loop`), a one-model run from `resume` when given."""
    return _Loop(learner, models, tasks, configs, callbacks, resume).run()


def _prepare(model: TracedModel, task, config: TrainConfig) -> Task:
    task = get_task(task)
    config.check(model, task)
    if config.device is not None:
        try:
            model.to(config.device)
        except (RuntimeError, AssertionError) as err:  # e.g. CUDA asked for on a CPU-only build
            raise ValueError(f"cannot use device '{config.device}': {err}") from None
    model.train()
    return task


def train(model: TracedModel, task: Task | str, config: TrainConfig, callbacks: Sequence[Callback] = (),
          resume: Snapshot | None = None) -> TrainResult:
    """Train `model` in place on `task`; returns the `TrainResult` (see the module docstring). `resume`: go on from
    a `RunState.snapshot` of this run (same model, task and config) exactly as it would have gone on; the callbacks'
    `on_start` is not called again (ValueError for another run's snapshot)."""
    task = _prepare(model, task, config)
    result = _run(_SingleLearner(model, config), [model], [task], [config], list(callbacks), resume)[0]
    model.eval()
    return result




def train_many(
    models: Sequence[TracedModel],
    tasks: Task | str | Sequence[Task | str],
    configs: TrainConfig | Sequence[TrainConfig],
    callbacks: Sequence[Callback] = (),
) -> list[TrainResult]:
    """Train K models of one architecture and config at once; each like its own `train` run.

    `tasks` and `configs` are one for all or one per model. Per model, the configs may differ only
    in `PER_MODEL_FIELDS` and `PER_MEMBER_STOPPING`; tasks may differ freely. Every model gets the
    data stream its own `train` run would, so results equal K separate runs up to float rounding.
    Models are trained in place; a model that stops early (its own steps or targets, divergence, a
    callback) keeps its weights while the others go on. Callbacks see every model (`state.member`).
    """
    models = list(models)
    if not models:
        raise ValueError("train_many needs at least one model")
    size = len(models)
    tasks = [tasks] * size if isinstance(tasks, (str, Task)) else list(tasks)
    configs = [configs] * size if isinstance(configs, TrainConfig) else list(configs)
    if len(tasks) != size or len(configs) != size:
        raise ValueError(f"got {size} models, {len(tasks)} tasks and {len(configs)} configs; give one or one per model")
    first = models[0]
    for model in models[1:]:
        if model.arch != first.arch or model.config != first.config:
            raise ValueError("train_many trains models of one architecture and config; "
                             f"got {first.arch} {first.config} and {model.arch} {model.config}")
    shared = [f.name for f in fields(TrainConfig) if f.name not in PER_MODEL_FIELDS + PER_MEMBER_STOPPING]
    for config in configs[1:]:
        differ = [name for name in shared if getattr(config, name) != getattr(configs[0], name)]
        if differ:
            raise ValueError(f"the configs of one train_many run may differ only in {PER_MODEL_FIELDS + PER_MEMBER_STOPPING}; "
                             f"they differ in {differ}")
    tasks = [_prepare(m, t, c) for m, t, c in zip(models, tasks, configs)]
    results = _run(_StackedLearner(models, configs), models, tasks, configs, list(callbacks))
    for model in models:
        model.eval()
    return results


def seeded(config: TrainConfig, seeds: Sequence[int]) -> list[TrainConfig]:
    """Copies of `config` with the given data seeds (for `train_many`)."""
    return [replace(config, seed=seed) for seed in seeds]
