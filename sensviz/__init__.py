"""sensviz: the loss-landscape theory of Hahn & Rofin (ACL 2024) on real models.

Glossary (one code name per paper symbol):

| code name          | paper symbol            | meaning                                                   |
|--------------------|-------------------------|-----------------------------------------------------------|
| `bits`             | x in {0,1}^n            | input strings `[batch, n]`; the ±1 view is 2*bits - 1     |
| `sensitivity`      | s(f,x)                  | flips of one bit that change f (influence form if real)   |
| `avg_sensitivity`  | as_n(f)                 | E_x s(f,x)                                                |
| `influence`        | Inf_i(f)                | E_x ((f(x) - f(x^i)) / 2)^2                               |
| `coefficients`     | lambda_P                | Fourier (Walsh–Hadamard) coefficients                     |
| `degree_profile`   | d_k                     | sum of lambda_P^2 over |P| = k; as_n = sum_k k d_k       |
| `ln_factor`        | N_i^(k)                 | 1 / sqrt(var(Y_i^(k)) + eps), what LayerNorm divides by   |
| `tau`              | tau^(k)(x)              | max_w (1 + N_w^(k)(x))                                    |
| `blowup`           | Blowup(x)               | prod_k tau^(k)(x)                                         |
| `sharpness`        | L_{rho,n}(T)            | E_x E_{|Delta|=rho} (T_{theta+Delta}(x) - T_theta(x))^2   |
| `param_norm`       | ||theta||               | L2 norm of all parameters except positional encodings     |
| `d_model`, `n_layers`, `n_heads`, `n_bits` / `n` | d, L, H, n | sizes                               |

Modules, by job (every module of the package):

- the theory: `tasks` (target functions), `cube` (exact and sampled cube analysis), `analysis` (a
  model on the cube), `blowup` (tau, Blowup, the trade-off), `params` (the flat parameter space
  theta and T at perturbed parameters), `sharpness` (L_rho, its exact small-rho limit, the
  loss-space proxy), `symmetries` (function-preserving maps of the encoder), `orbit_sharpness` (the
  least L_rho over a bounded part of a model's orbit), `slices` (the loss along directions in
  parameter space), `curvature` (Hessian eigenvalues and trace), `length_generalization`, `losses`
  (training and evaluation losses);
- the models: `formal` and `encoder` (the two architectures), `scratchpad` (the encoder-decoder of
  the scratchpad experiment), `base` (what they share: LayerNorm, the TracedModel base), `trace` and
  `hooks` (the instrumented forward pass), `models` (registry), `checkpoints` (safetensors I/O);
- measuring and training: `settings` (a run's model, training and measurement settings, torch-free),
  `measure` (every quantity of one model through one set of settings; a quantity is one registry
  entry), `training` (the trainer, multi-model batches), `snapshots` (where a run stands, to go on from
  it exactly after its process ended), `monitor` (measurements while training),
  `zoo` (the pretrained checkpoints);
- the model before training: `init_study` (M random initialisations on the cube), `init_claim` (its
  claim, decided by a stated rule), `init_training` (where training goes from one of them),
  `init_charts` (their tables and charts);
- the experiments: `experiments` (the paper's experiments as sweep jobs, one module each: its job,
  figures, fidelity sections and Lab data; the registry finds them), `experiment_jobs` (their
  jobs' machinery: prepare, run, measure), `sweeps` (TOML specs, result tables), `executors`
  (local processes or Ray), `convergence` (the convergence filter, written once);
- the results kit (torch-free): `results` (loading a scale's tables and their figures), `stats`
  (the statistics that decide the claims), `claims` (claims and their tests), `findings` (one
  verdict per claim across every table), `sizing` (a design's seeds from earlier tables),
  `figures` (paper-style figures of the result tables), `fidelity` (the fidelity pages),
  `preregistered` (a scale's pre-registered analysis applied to its tables), `confirm` (a
  confirmatory design sized from an exploratory one), `symmetry_zoo` (sharpness under
  function-preserving maps across the zoo, claim R3), `report` (a standalone HTML report of
  finished sweeps);
- the Lab: `lab` (its guided chapters), `lab_charts` (its strip charts), `handout` (the Lab on paper), `glossary` (every term the
  pages use), `mathml` (formulas typeset offline);
- around them: `processes` (child processes that end with their parent), `limits` (named limits on
  everything a user controls), `text` (user text shown as text), `files` (atomic writes, the data
  folder), `tables` (tidy tables of the measurements), `charts` (Altair charts of them);
- plumbing: `configs` (typed settings), `records` (results as JSON), `cli` and `__main__` (the
  `sensviz` command).

The class server (the training-job queue, its worker, the kept-model store, classes, owners and
budgets) is the `server` package beside this one; `sensviz` never imports it.
"""

import importlib
import importlib.util

_NAMES = {  # a public name: the module that defines it
    "TracedModel": "base",
    **dict.fromkeys(("Checkpoint", "CheckpointError", "checkpoint_bytes", "load_checkpoint", "save_checkpoint"),
                    "checkpoints"),
    **dict.fromkeys(("EncoderConfig", "EncoderTransformer"), "encoder"),
    **dict.fromkeys(("FormalConfig", "FormalTransformer"), "formal"),
    "build_model": "models",
    "MeasurementCallback": "monitor",
    **dict.fromkeys(("ScratchpadConfig", "ScratchpadTransformer"), "scratchpad"),
    **dict.fromkeys(("PM1", "ZERO_ONE", "Task", "get_task"), "tasks"),
    "Trace": "trace",
    **dict.fromkeys(("Callback", "TrainConfig", "TrainResult", "train", "train_many"), "training"),
}


def __getattr__(name: str):
    """The public names, imported on first use (PEP 562): `import sensviz` and the modules that need no
    torch (`sensviz.text`, the Lab's shipped data) stay light; `sv.tasks`, `sv.Task`, `sv.<any module>` load
    theirs."""
    if name in _NAMES:
        value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
        globals()[name] = value  # once
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:  # any module
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "analysis",
    "base",
    "blowup",
    "cube",
    "curvature",
    "configs",
    "length_generalization",
    "measure",
    "records",
    "monitor",
    "params",
    "scratchpad",
    "sharpness",
    "slices",
    "tasks",
    "training",
    "zoo",
    "Checkpoint",
    "CheckpointError",
    "checkpoint_bytes",
    "load_checkpoint",
    "save_checkpoint",
    "EncoderConfig",
    "EncoderTransformer",
    "FormalConfig",
    "FormalTransformer",
    "build_model",
    "MeasurementCallback",
    "ScratchpadConfig",
    "ScratchpadTransformer",
    "PM1",
    "ZERO_ONE",
    "Task",
    "get_task",
    "Trace",
    "TracedModel",
    "Callback",
    "TrainConfig",
    "TrainResult",
    "train",
    "train_many",
]
