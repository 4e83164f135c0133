"""What a live training job will cost, before it runs: its time and peak memory, and the server's budget.

`estimate(settings, config, measure_every, calibration, task)` counts the work of a `server.worker` job — every training step,
every scheduled evaluation and measurement, the checkpoints it writes — from the model's shapes
alone (the model is built on torch's "meta" device: shapes, no storage), and turns it into
seconds with a `Calibration` measured on this machine, and into bytes with the formula below.
`check(estimate, budget)` refuses a job over the server's `Budget` ($SENSVIZ_JOB_BUDGET, e.g.
"900s,4096MiB"), naming the budget and the estimate.

**Time.** Work comes in two currencies: `ops` (tensor operations, each with a fixed overhead: what
bounds small models) and `flops` (multiply-adds x 2: what bounds large ones). With P the model's
parameters, n the (longest) input length, d the width, L the layers (3L for the scratchpad: an
encoder layer, and a decoder layer counted twice for its self-attention and cross-attention blocks,
each with its LayerNorm and residual), A the attention blocks (L; 3L for the scratchpad) of H heads each,
and w a block's width (d; H d for the formal model, whose heads are d wide each), one forward pass over b
strings costs

    flops_fwd(b) = 2 b n P  +  4 b n^2 w A          ops_fwd = OPS_PER_LAYER * L (per call)

Elementwise work (LayerNorm, softmax, residuals, the heads' split and merge: memory-bound) adds, in
flop-equivalents, a `PassCost` per token: `width` per unit of each layer's d + d_ff, `score` per
attention score (A H n of them), `spill` more per score when one call's scores outgrow `CACHE_BYTES`,
and `head` per head of each attention block (A H: a softmax row, narrow heads' overhead). `FORWARD`
prices a pass without gradients, `TRAINING` a training step's forward and backward together, whose
matmuls are 3 x the forward's and its ops 3 x plus `TRAIN_OPS`; AdamW adds `ADAM_FLOPS_PER_PARAM` * P.
`python benchmarks/budget_fit.py` measures both on this machine and fits them (least squares on the
relative error over one-layer encoders of widths 8-128, 1-8 heads, n 8-24). An evaluation
is a forward over the evaluation strings in chunks of 2048; one every `eval_interval` steps, at
step 0 and at the end. A measurement (`sensviz.monitor` with the worker's `live_settings()`: M =
min(2^n, `LIVE_INPUTS`) landscape inputs, D = `LIVE_DIRECTIONS` directions) is
two forwards over M (loss and accuracy; L_rho's unperturbed outputs); sensitivity, a forward over the 2^n
strings up to n = 14, else over 512 samples with their n neighbours and one over the samples (accuracy);
Blowup, a forward over the cube or the 512 samples; D directions x (a forward over M + `PERTURB_FLOPS_PER_PARAM` * P);
for the scratchpad, greedy decoding of the M inputs (n forwards over the growing prefix: n x the
ops, (n + 1) / 2 x the flops of a forward); per-example gradients over M (`PER_EXAMPLE_FACTOR` x the
flops of a training pass, times n outputs for the scratchpad, plus `GRADIENT_ELEMENT_FLOPS` per gradient
element M P); `MEASURE_OPS_PER_LAYER` * L operations of bookkeeping; and a checkpoint
(`CHECKPOINT_FLOPS_PER_PARAM` * P + `CHECKPOINT_OPS`, and `TABLE_CHECKPOINT_FLOPS` * 2^n for a task given
by a truth table, which also costs `TABLE_FLOPS` * 2^n once). One is scheduled every `measure_every` steps,
at step 0 and at the end, but the worker skips one while measuring has taken longer than training,
so measuring costs at most the training time plus two measurements.

    seconds = op_s * ops + flop_s * flops        (summed over every phase)

`op_s` and `flop_s` come from `calibrate()`: the CPU time of training steps of two reference
models on this machine, one tiny (all overhead) and one wide (all arithmetic), in about a second.
The estimate is CPU seconds on one core: what the job takes on an idle core (more threads are faster,
a busy machine is slower in wall-clock terms).

**Memory** (peak growth of the worker's resident memory, in bytes, float32 = 4 bytes):

    resident  = 4 P * RESIDENT_PER_PARAM   weights, gradients, AdamW's two moments, the last good
                                           copy; a checkpoint's bytes and its serialisation
    training  = 4 b n L (ACT_PER_WIDTH d + 2 d_ff + ACT_PER_SCORE H n)   a training step's activations at
                                           its peak (saved for backward, and the backward's gradients)
    no grad   = 4 b n (8 d + 2 d_ff + 2 H n)   the largest tensors of a forward pass without gradients
                (an evaluation chunk, a batch of the cube analyses)
    gradients = 4 c k P + training(c k)   a chunk of c = min(M, 1024, 2^24 / (k P)) per-example
                gradients of k outputs each (k = n for the scratchpad, else 1)
    data      = DATA_BYTES_PER_BIT * E n   the evaluation strings, E of them (a restricted training set's
                                           strings and its held-out rest, or the cube or a sample per length)
    table     = TABLE_COPIES * 2^n     a task given by a truth table (random, table)
    peak      = BASE_MIB + resident + training + max(no grad, gradients) + data + table

(training's activations and a later pass's add up: the allocator keeps the memory a training step
freed, in pieces that a pass of another shape cannot always reuse).

The constants were fitted on the development machine (tests/server/test_budget.py keeps time and memory
within 2x of what the worker measures, over configurations across the Train form's ranges).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from sensviz.files import write_atomic

from .worker import LIVE_DIRECTIONS, LIVE_INPUTS

# The cost model's constants (fitted on the development machine; see the module docstring).
OPS_PER_LAYER = 40
"""Tensor operations of one layer's forward pass (attention, feed-forward, two LayerNorms, residuals)."""
TRAIN_OPS = 30
"""Operations of a step besides the model's (data, loss, AdamW's foreach kernels)."""
GRADIENT_ELEMENT_FLOPS = 1000
"""Work per element of the per-example gradients (gathering, flattening and reducing them)."""
CACHE_BYTES = 2**21
"""The cache one call's attention scores fit in (a core's 2 MiB of L2 here); larger ones stream through memory."""
ADAM_FLOPS_PER_PARAM = 60
"""AdamW and the last-good copy per parameter, in flop-equivalents (elementwise, memory-bound)."""
PERTURB_FLOPS_PER_PARAM = 40
"""Drawing and applying one random direction, per parameter."""
PER_EXAMPLE_FACTOR = 3.0
"""Per-example gradients (vmap of jacrev) against one batched forward-and-backward pass."""
PER_EXAMPLE_OPS = 6
"""Operations of a per-example-gradient call against a forward pass."""
MEASURE_OPS_PER_LAYER = 1500
"""Operations of one measurement besides its passes (hooks, reports, the quantities' bookkeeping), per layer."""
CHECKPOINT_FLOPS_PER_PARAM = 100
"""Serialising and writing one checkpoint, per parameter."""
CHECKPOINT_OPS = 200
"""A checkpoint's fixed cost (metadata, the file), in operations."""
ACT_PER_WIDTH = 12
"""Floats per token, layer and unit of width at a training step's peak (saved for the backward pass, and its
gradients), fitted by `benchmarks/budget_fit.py --memory`."""
ACT_PER_SCORE = 7
"""Floats per attention score at a training step's peak: the scores, their shifted exponentials and the weights
saved for the backward pass, and the gradients of the backward pass (fitted as `ACT_PER_WIDTH`)."""
RESIDENT_PER_PARAM = 8
"""Floats per parameter held while training: weights, gradients, AdamW's two moments, the last
good copy, and a checkpoint's bytes with their serialisation."""
BASE_MIB = 16
"""What any job adds however small: the trainer's lazily loaded modules, allocator arenas, the records."""
DATA_BYTES_PER_BIT = 32
"""Bytes per bit of the evaluation strings (int64 `[E, n]`, 8 bytes a bit): the run's sets, their stacked copy
for the batched evaluation, and the transients of making them (`cube.vertex_bits`) and of a table lookup. A
restricted set of 2^20 strings at n = 20 grew the worker by 386 MiB (batch 64) and 1,008 MiB (batch 1024)
here, 16 and 45 bytes a bit above the rest: the allocator keeps more or less of the transients."""
TABLE_COPIES = {"random": 2, "table": 6}
"""Bytes per truth-table entry of the tasks given by a table (`sensviz.tasks._TableTask`): the random
task's uint8 draw and its transient; a given table's label string, its bits, their encoding, the uint8
table, its copy and the checkpoint's packing."""
TABLE_FLOPS = {"random": 400, "table": 1400}
"""Work per truth-table entry, once per run, in flop-equivalents: drawing the random table; parsing,
copying and packing a given one."""
TABLE_CHECKPOINT_FLOPS = {"random": 0, "table": 450}
"""Work per truth-table entry of every checkpoint a run writes (a measurement's, the result's): a given table
is checked against the length and hashed into the checkpoint again (the random task is saved as its seed)."""

# What the worker and the library do (their sizes, as the cost model needs them).
EVAL_CHUNK = 2048  # sensviz.training: evaluation strings per forward call
SAMPLES = 512  # MeasureSettings: cube samples above the exact limit
EXACT_LIMIT = 14  # MeasureSettings: the largest n analysed over the whole cube
ANALYSIS_BATCH = 2048  # sensviz.analysis: strings per forward call of the cube analyses
GRADIENT_FLOATS = 2**24  # sensviz.params.GRADIENT_BUDGET: per-example gradient floats at once
GRADIENT_CHUNK = 1024  # sensviz.params.CHUNK_SIZE
DEFAULT_BUDGET = "1800s,4096MiB"
MiB = 2**20


@dataclass(frozen=True)
class PassCost:
    """The elementwise work of a pass per token, in flop-equivalents (the module docstring has the terms)."""

    width: float  # per unit of d + d_ff of each layer (LayerNorm, activations, residuals)
    score: float  # per attention score
    spill: float  # added per score when one call's scores outgrow CACHE_BYTES
    head: float  # per head of each attention block (a softmax row; narrow heads' split and merge)

    def flops(self, s: Shape, strings: int, n: int, calls: int = 1) -> float:
        width, scores, spilled, heads = elementwise_terms(s, strings, n, calls)
        return self.width * width + self.score * scores + self.spill * spilled + self.head * heads


FORWARD = PassCost(width=340, score=320, spill=340, head=8300)
"""A pass without gradients (evaluations, the cube analyses, the directions), fitted by benchmarks/budget_fit.py."""
TRAINING = PassCost(width=940, score=590, spill=1760, head=46_500)
"""A training step's forward and backward together, fitted by benchmarks/budget_fit.py."""


@dataclass(frozen=True)
class Calibration:
    """Seconds per tensor operation and per flop on this machine (one core), from `calibrate`."""

    op_s: float
    flop_s: float


@dataclass(frozen=True)
class Shape:
    """What the cost depends on: parameters, width, layers, attention blocks and their width, heads."""

    arch: str
    params: int
    d_model: int
    d_ff: int
    layers: int
    attention: int  # attention blocks (each `heads` heads)
    attention_width: int  # the width of a block's queries and keys: d_model, or H * d_model (formal)
    heads: int
    limit: bool = True  # the monitor measures the small-rho limit (per-example gradients) of this model


@dataclass(frozen=True)
class Estimate:
    """A job's estimated CPU seconds and peak memory growth (MiB), with the work behind them."""

    seconds: float
    mib: float
    params: int
    steps: int
    evaluations: int
    measurements: int

    def describe(self) -> str:
        return (f"about {duration(self.seconds)} and {self.mib:,.0f} MiB ({self.params:,} parameters, "
                f"{self.steps:,} steps, {self.evaluations:,} evaluations, up to {self.measurements:,} measurements)")


@dataclass(frozen=True)
class Budget:
    """The most one job may take: seconds (of CPU time, and of wall-clock time) and MiB of memory."""

    seconds: float
    mib: float

    def over(self, wall_s: float, process, before_s: float = 0.0) -> bool:
        """Whether a running job is past its time: `wall_s` seconds since it started, or its process's CPU time
        (`cpu_seconds`: a run on two threads spends two CPU seconds a second), each with the `before_s` seconds the
        run trained before a restart (a continuation's), above `seconds`."""
        return (wall_s + before_s > self.seconds
                or cpu_seconds(getattr(process, "pid", None)) + before_s > self.seconds)

    @classmethod
    def parse(cls, text: str) -> Budget:
        """'900s,4096MiB' (either part may be left out: the default's is used); ValueError with the reason."""
        default = _parse(DEFAULT_BUDGET)
        return cls(**{**default, **_parse(text)})

    def describe(self) -> str:
        return f"{duration(self.seconds)} and {self.mib:,.0f} MiB"


def cpu_seconds(pid: int | None) -> float:
    """The CPU time (user and system, all threads) process `pid` has used, from /proc; 0 where it cannot be
    read (no pid yet, a run on another machine, a process that ended, no /proc)."""
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _parse(text: str) -> dict:
    values = {}
    for part in filter(None, (p.strip() for p in text.lower().split(","))):
        for suffix, name, scale in (("mib", "mib", 1), ("gib", "mib", 1024), ("min", "seconds", 60), ("s", "seconds", 1)):
            if part.endswith(suffix):
                try:
                    value = float(part[: -len(suffix)]) * scale
                except ValueError:
                    break
                if math.isfinite(value) and value > 0:
                    values[name] = value
                    break
        else:
            raise ValueError(f"SENSVIZ_JOB_BUDGET: cannot read '{part}'; write e.g. '900s,4096MiB' (s, min; MiB, GiB)")
        if name not in values:
            raise ValueError(f"SENSVIZ_JOB_BUDGET: '{part}' is not a positive number of s, min, MiB or GiB")
    return values


def server_budget() -> Budget:
    """The server's budget of one job: $SENSVIZ_JOB_BUDGET, else `DEFAULT_BUDGET` (30 min, 4 GiB)."""
    return Budget.parse(os.environ.get("SENSVIZ_JOB_BUDGET", DEFAULT_BUDGET))


def shape(model_settings, n: int) -> Shape:
    """The shape of the model a request builds, from a model built on the meta device (no storage)."""
    import torch

    from sensviz.measure import affordable

    with torch.device("meta"):
        model = model_settings.build(n)
    params = sum(p.numel() for p in model.parameters())
    config = model.config
    layers = config.n_layers * (3 if model_settings.arch == "scratchpad" else 1)
    attention = 3 * config.n_layers if model_settings.arch == "scratchpad" else config.n_layers
    width = config.d_model * (config.n_heads if model_settings.arch == "formal" else 1)
    limit = "limit" in affordable(model, "cheap")  # what the monitor measures by default (not the scratchpad's)
    return Shape(model_settings.arch, params, config.d_model, config.d_ff or config.d_model, layers, attention, width,
                 config.n_heads, limit)


def elementwise_terms(s: Shape, strings: int, n: int, calls: int = 1) -> tuple[float, float, float, float]:
    """What passes over `strings` strings of length n in `calls` calls do elementwise, the terms of a `PassCost`:
    units of width (b n L (d + d_ff)), attention scores (b n A H n), the scores of calls whose scores (one
    block's) outgrow `CACHE_BYTES` (all or none), and heads (b n A H)."""
    tokens = strings * n
    scores = tokens * s.attention * s.heads * n
    spilled = scores if 4.0 * scores / (s.attention * max(calls, 1)) > CACHE_BYTES else 0.0
    return tokens * s.layers * (s.d_model + s.d_ff), scores, spilled, tokens * s.attention * s.heads


def _matmul(s: Shape, strings: int, n: int) -> float:
    """Flops of a forward pass's matmuls over `strings` strings of length n."""
    return 2.0 * strings * n * s.params + 4.0 * strings * n * n * s.attention_width * s.attention


def _forward(s: Shape, strings: int, n: int, calls: int = 1) -> tuple[float, float]:
    """(ops, flops) of forward passes without gradients over `strings` strings of length n in `calls` calls."""
    return calls * OPS_PER_LAYER * s.layers, _matmul(s, strings, n) + FORWARD.flops(s, strings, n, calls)


def _training(s: Shape, strings: int, n: int, calls: int = 1, cost: PassCost | None = None) -> tuple[float, float]:
    """(ops, flops) of forward and backward passes over `strings` strings of length n in `calls` calls, the
    elementwise work priced by `cost` (default `TRAINING`)."""
    return (3 * calls * OPS_PER_LAYER * s.layers,
            3 * _matmul(s, strings, n) + (cost or TRAINING).flops(s, strings, n, calls))


def _step(s: Shape, batch: int, n: int, cost: PassCost | None = None) -> tuple[float, float]:
    """(ops, flops) of one training step on `batch` strings of length n: forward, backward, data, loss and AdamW."""
    ops, flops = _training(s, batch, n, cost=cost)
    return ops + TRAIN_OPS, flops + ADAM_FLOPS_PER_PARAM * s.params


def _activation_bytes(s: Shape, strings: int, n: int, saved: bool) -> float:
    """Activations of a forward over `strings` strings: every layer's, kept for the backward pass,
    when `saved`; else (no grad) the largest tensors alive at once."""
    if saved:
        return 4.0 * strings * n * s.layers * (ACT_PER_WIDTH * s.d_model + 2 * s.d_ff + ACT_PER_SCORE * s.heads * n)
    return 4.0 * strings * n * (8 * s.d_model + 2 * s.d_ff + 2 * s.heads * n)


def _eval_strings(config) -> list[int]:
    """Strings of one evaluation, per length (the restricted set and its held-out rest, or the cube or a sample)."""
    if config.train_size is not None:
        return [min(config.train_size, config.eval_size) + min(config.eval_size, 2**config.n - config.train_size)]
    return [min(2**n, config.eval_size) for n in config.lengths]


def _table(task, n: int) -> tuple[float, float, float]:
    """(bytes, flops once per run, flops per checkpoint) of a task given by a truth table at length n; zeros
    for any other task."""
    name = getattr(task, "name", None)
    if name not in TABLE_COPIES:
        return 0.0, 0.0, 0.0
    return TABLE_COPIES[name] * 2.0**n, TABLE_FLOPS[name] * 2.0**n, TABLE_CHECKPOINT_FLOPS[name] * 2.0**n


def phases(model_settings, config, calibration: Calibration, task=None) -> dict[str, float]:
    """Seconds of one training step, one evaluation, one measurement and one checkpoint, and the
    peak memory growth in bytes (the module docstring has the formulas); `task` (a `sensviz.tasks.Task`)
    adds a truth table's work and memory."""
    s = shape(model_settings, config.n)
    n, b = config.n, config.batch_size
    outputs = n if s.arch == "scratchpad" else 1  # per-example gradients of every decoder step

    def seconds(ops, flops):
        return calibration.op_s * ops + calibration.flop_s * flops

    step = seconds(*_step(s, b, n))

    evaluation = 0.0
    for strings in _eval_strings(config):
        evaluation += seconds(*_forward(s, strings, n, math.ceil(strings / EVAL_CHUNK)))

    m = min(2**n, LIVE_INPUTS)
    # sensitivity and Blowup: the cube, or samples with their n neighbours and the samples alone
    analyses = [2**n, 2**n] if n <= EXACT_LIMIT else [SAMPLES * (n + 1), SAMPLES, SAMPLES]  # sampled: its accuracy
    per_call = min(analyses[0], ANALYSIS_BATCH)
    grad_chunk = max(1, min(m, GRADIENT_CHUNK, GRADIENT_FLOATS // (s.params * outputs)))
    parts = [_forward(s, 2 * m, n, 2), *(_forward(s, a, n, math.ceil(a / per_call)) for a in analyses),  # M: loss, L_rho's base
             _forward(s, m * LIVE_DIRECTIONS, n, LIVE_DIRECTIONS)]
    if s.arch == "scratchpad":  # greedy decoding: n passes over the growing prefix, (n + 1) / 2n of a full one each
        ops, flops = _forward(s, m, n, n)
        parts.append((ops, flops * (n + 1) / (2 * n)))
    pex_ops, _ = _forward(s, m, n, math.ceil(m / grad_chunk))
    _, pex_flops = _training(s, m, n, math.ceil(m / grad_chunk))
    limit = 1.0 if s.limit else 0.0  # the per-example gradients of the small-rho limit, when the monitor measures it
    table_bytes, table_flops, table_checkpoint_flops = _table(task, n)
    checkpoint = seconds(CHECKPOINT_OPS, CHECKPOINT_FLOPS_PER_PARAM * s.params + table_checkpoint_flops)
    measurement = checkpoint + seconds(
        sum(p[0] for p in parts) + limit * PER_EXAMPLE_OPS * pex_ops + MEASURE_OPS_PER_LAYER * s.layers,
        sum(p[1] for p in parts) + limit * (PER_EXAMPLE_FACTOR * pex_flops * outputs
                                            + GRADIENT_ELEMENT_FLOPS * m * outputs * s.params)
        + LIVE_DIRECTIONS * PERTURB_FLOPS_PER_PARAM * s.params)

    transient = _activation_bytes(s, b, n, saved=True) + max(  # the allocator keeps what training freed
        _activation_bytes(s, min(max(_eval_strings(config)), EVAL_CHUNK), n, saved=False),
        _activation_bytes(s, per_call, n, saved=False),
        limit * (4.0 * grad_chunk * outputs * s.params + _activation_bytes(s, grad_chunk * outputs, n, saved=True)),
    )
    data = DATA_BYTES_PER_BIT * sum(_eval_strings(config)) * n
    return {"step": step, "evaluation": evaluation, "measurement": measurement, "checkpoint": checkpoint,
            "table": seconds(0, table_flops), "bytes": RESIDENT_PER_PARAM * 4.0 * s.params + transient + data + table_bytes,
            "params": s.params}


def estimate(model_settings, config, measure_every: int, calibration: Calibration, task=None) -> Estimate:
    """The time and peak memory of a live job (the module docstring has the formula); `task`, the job's
    `sensviz.tasks.Task` (as `server.worker.check` gives it), counts a truth table's cost."""
    cost = phases(model_settings, config, calibration, task)
    steps = config.steps
    evaluations = steps // config.eval_interval + 2
    measurements = steps // measure_every + 2
    training = steps * cost["step"]
    measuring = min(measurements * cost["measurement"], training + 2 * cost["measurement"])
    seconds = training + evaluations * cost["evaluation"] + measuring + cost["checkpoint"] + cost["table"]
    return Estimate(seconds, BASE_MIB + cost["bytes"] / MiB, cost["params"], steps, evaluations, measurements)


def check(found: Estimate, budget: Budget) -> None:
    """Raise ValueError when a job's estimate is over the server's budget (naming both)."""
    over = []
    if found.seconds > budget.seconds:
        over.append(f"time: about {duration(found.seconds)} against {duration(budget.seconds)}")
    if found.mib > budget.mib:
        over.append(f"memory: about {found.mib:,.0f} MiB against {budget.mib:,.0f} MiB")
    if over:
        raise ValueError(f"this run is over the server's budget per run ({budget.describe()}; SENSVIZ_JOB_BUDGET): "
                         f"{'; '.join(over)}. Fewer steps, a smaller batch or model, or measuring less often "
                         "brings it down.")


def duration(seconds: float) -> str:
    """Seconds for people: "8.5 s", "42 s", "12 min", "2.5 h"."""
    if seconds < 100:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    return f"{seconds / 60:,.0f} min" if seconds < 6000 else f"{seconds / 3600:,.1f} h"


def _step_seconds(d_model: int, n_layers: int, batch: int, n: int, repeats: int) -> float:
    """CPU seconds of one training step of an encoder (the best of `repeats`, after one untimed step)."""
    import torch

    import sensviz as sv
    from sensviz.losses import loss_value
    from sensviz.training import adamw

    model = sv.build_model("encoder", d_model=d_model, n_layers=n_layers, n_heads=2, max_len=n, seed=0)
    optimizer = adamw(model.parameters(), lr=1e-3, weight_decay=0.01)
    bits = torch.randint(0, 2, (batch, n), generator=torch.Generator().manual_seed(0))
    best = math.inf
    for i in range(repeats + 1):
        start = time.process_time()
        loss = loss_value(model.training_outputs(bits).reshape(-1), bits[:, 0].float(), "mse")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if i:
            best = min(best, time.process_time() - start)
    return best


TINY_REPEATS = 100
"""Tiny steps `calibrate` takes the fastest of: a fresh process's first ones run slow (1.5-1.7 times the rest here,
which made the best of 20 vary 1.7x between calibrations; the best of 100 varied 1.06x)."""


def reference_seconds() -> tuple[float, float]:
    """The CPU seconds of one training step of `calibrate`'s two reference models on one torch thread: a tiny one
    (overhead only) and a wide one (arithmetic)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _step_seconds(8, 1, 1, 2, repeats=TINY_REPEATS), _step_seconds(256, 1, 256, 16, repeats=3)
    finally:
        torch.set_num_threads(threads)


def calibration_from(tiny_s: float, wide_s: float, training: PassCost | None = None) -> Calibration:
    """`op_s` and `flop_s` from the reference steps' seconds (`reference_seconds`), the wide step's elementwise
    work priced by `training` (default `TRAINING`; benchmarks/budget_fit.py passes the costs it fits)."""
    from sensviz.models import ModelSettings

    tiny = Shape("encoder", 0, 8, 8, 1, 1, 8, 2)
    op_s = tiny_s / (_training(tiny, 1, 2)[0] + 2)
    wide = shape(ModelSettings(d_model=256, n_layers=1, n_heads=2), 16)
    ops, flops = _training(wide, 256, 16, cost=training)
    flops += ADAM_FLOPS_PER_PARAM * wide.params  # `_step`'s flops; its ops' TRAIN_OPS are counted as 2 here (the fit's)
    return Calibration(op_s, max(wide_s - op_s * (ops + 2), wide_s / 10) / flops)


def calibrate() -> Calibration:
    """Measure `op_s` and `flop_s` here: a tiny model's step (overhead only) and a wide one's (arithmetic).

    Uses one torch thread while it measures (CPU time, so other processes on the machine matter little)."""
    return calibration_from(*reference_seconds())


CALIBRATION_MAX_AGE_S = 86_400
"""A kept calibration is measured again after a day, even within one boot of the machine."""


def calibration_file() -> Path | None:
    """Where this machine's calibration is kept between server starts: `$XDG_CACHE_HOME/sensviz/` (by
    default `~/.cache/sensviz/`); None for a user without a home folder (nothing is kept)."""
    cache = os.environ.get("XDG_CACHE_HOME")
    if not cache:
        try:
            cache = Path.home() / ".cache"
        except RuntimeError:
            return None
    return Path(cache) / "sensviz" / "calibration.json"


def machine_key() -> str | None:
    """What a calibration holds for: this boot of this machine (its boot id), its CPU count, this Python
    and torch, and this module (its cost model). None where the boot id cannot be read."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        parts = [boot, str(os.cpu_count()), sys.executable, metadata.version("torch"),
                 hashlib.sha256(Path(__file__).read_bytes()).hexdigest()]
    except (OSError, metadata.PackageNotFoundError):
        return None
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def kept_calibration() -> Calibration | None:
    """The calibration kept by `keep_calibration` on this boot of this machine within the last day, if any
    (a missing, unreadable or foreign file: None, and the caller measures)."""
    key, path = machine_key(), calibration_file()
    if key is None or path is None:
        return None
    try:
        found = json.loads(path.read_text())
        if found["key"] != key or not 0 <= time.time() - found["measured"] < CALIBRATION_MAX_AGE_S:
            return None
        calibration = Calibration(float(found["op_s"]), float(found["flop_s"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return calibration if all(0 < v < math.inf for v in (calibration.op_s, calibration.flop_s)) else None


def keep_calibration(calibration: Calibration) -> None:
    """Keep `calibration` for the next server started on this machine (`kept_calibration`): a restarted
    server need not measure again. Where the file cannot be written, nothing is kept."""
    key, path = machine_key(), calibration_file()
    if key is None or path is None:
        return
    with contextlib.suppress(OSError, ValueError):
        write_atomic(path, json.dumps({"key": key, "measured": time.time(), **asdict(calibration)}).encode())


def main() -> None:
    """`python -m server.budget`: print this machine's calibration as one JSON line (`server.jobs` reads it)."""
    print(json.dumps(asdict(calibrate())))


if __name__ == "__main__":
    main()
