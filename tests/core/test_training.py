"""The trainer: learning, determinism, batched = separate, divergence, early stop, restricted sets, callbacks."""

import json
import math
import re
from dataclasses import replace

import pytest
import torch

import sensviz as sv
from sensviz import analysis, cube, training
from sensviz.training import Callback, TrainConfig, TrainingData, seeded, train, train_many

SMALL = {"d_model": 8, "n_layers": 1, "n_heads": 2}


def small(arch="encoder", n=5, seed=0, **fields):
    return sv.build_model(arch, seed=seed, **{**SMALL, "max_len": n, **fields})


class Recorder(Callback):
    """Records every call, and the weights after every step."""

    def __init__(self, stop_at=None):
        self.calls, self.weights, self.stop_at = [], {}, stop_at

    def on_start(self, state):
        self.calls.append(("start", state.step))
        self.weights[0] = [p.detach().clone() for p in state.model.parameters()]

    def on_step(self, state):
        self.calls.append(("step", state.step, state.n))
        self.weights[state.step] = [p.detach().clone() for p in state.model.parameters()]

    def on_eval(self, state, record):
        self.calls.append(("eval", record["step"]))

    def should_stop(self, state):
        return self.stop_at is not None and state.step >= self.stop_at

    def on_end(self, state, result):
        self.calls.append(("end", result.steps))


def params_equal(model, weights):
    return all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))


def test_a_few_hundred_steps_learn_first_at_n6_to_100_percent():
    model = sv.build_model("encoder", d_model=16, n_layers=2, n_heads=2, max_len=6, seed=0)
    result = train(model, "first", TrainConfig(n=6, batch_size=128, steps=300, lr=1e-3, eval_interval=50))
    assert result.stop_reason == "completed" and result.steps == 300
    assert result.final["eval_accuracy"] == 1.0 and result.final["step"] == 300
    assert analysis.accuracy(analysis.cube_outputs(model, 6), sv.get_task("first").values(6)) == 1.0
    assert [r["step"] for r in result.history] == [0, 50, 100, 150, 200, 250, 300]
    assert result.history[0]["eval_loss"] > 10 * result.final["eval_loss"]
    frame = result.frame()
    assert list(frame["step"]) == [0, 50, 100, 150, 200, 250, 300] and frame["eval_accuracy"].iloc[-1] == 1.0


@pytest.mark.parametrize("loss,pm1", [("mse", True), ("bce", False)])
def test_other_losses_and_encodings_learn_too(loss, pm1):
    model = small(n=4)
    config = TrainConfig(n=4, batch_size=64, steps=200, lr=3e-3, loss=loss, pm1_targets=pm1, eval_interval=50)
    result = train(model, "first", config)
    assert result.final["eval_accuracy"] == 1.0
    encoding = config.encoding
    assert encoding.name == ("pm1" if pm1 else "logit")
    assert analysis.accuracy(analysis.cube_outputs(model, 4), sv.get_task("first").values(4), encoding) == 1.0


def test_same_seed_same_run_bit_for_bit():
    config = TrainConfig(n=5, batch_size=32, steps=40, lr=2e-3, eval_interval=10)
    runs = []
    for seed in (3, 3, 4):
        model = small(seed=seed)
        runs.append((model, train(model, "majority", replace(config, seed=seed))))
    (a, ra), (b, rb), (c, rc) = runs
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert ra.history == rb.history
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))
    assert ra.history != rc.history


def test_data_streams_are_seeded_and_distinct():
    a, b, c = (TrainingData(TrainConfig(n=6, batch_size=16, seed=s)) for s in (0, 0, 1))
    first = a.batch(6)
    assert torch.equal(first, b.batch(6)) and not torch.equal(first, c.batch(6))
    assert not torch.equal(first, a.batch(6))  # a fresh batch every step


def _key_bias_mask(model):
    """In every attention, the key part of in_proj_bias adds a constant to each query's scores: softmax
    ignores it, its true gradient is 0, and Adam turns rounding noise there into ±lr steps that do
    not change the function. Everything else must agree."""
    masks = {}
    for name, p in model.named_parameters():
        mask = torch.ones_like(p, dtype=torch.bool)
        if name.endswith("in_proj_bias"):
            d = p.shape[0] // 3
            mask[d : 2 * d] = False
        masks[name] = mask
    return masks


@pytest.mark.parametrize("arch", ["encoder", "formal", "scratchpad"])
def test_train_many_equals_separate_runs(arch):
    n = 5
    tasks = ["parity", "parity", "parity"] if arch == "scratchpad" else ["parity", "majority", "first"]
    base = TrainConfig(n=n, batch_size=32, steps=40, lr=3e-3, weight_decay=0.1, eval_interval=10)
    configs = seeded(base, [0, 1, 2])
    configs[2] = replace(configs[2], lr=1e-3, weight_decay=0.3)  # per-model lr and weight decay
    together = [small(arch, seed=s) for s in range(3)]
    results = train_many(together, tasks, configs)
    bits = cube.vertices(n)
    for k, (task, config) in enumerate(zip(tasks, configs)):
        alone = small(arch, seed=k)
        expected = train(alone, task, config)
        assert results[k].model is together[k] and results[k].steps == expected.steps == 40
        masks = _key_bias_mask(alone)
        for (name, p), q in zip(alone.named_parameters(), together[k].parameters()):
            assert torch.allclose(p[masks[name]], q[masks[name]], atol=2e-5, rtol=1e-4), name
        with torch.no_grad():
            assert torch.allclose(alone(bits), together[k](bits), atol=2e-5)
        for a, b in zip(expected.history, results[k].history):
            assert a["step"] == b["step"]
            assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-4, abs=1e-7)


def test_stacked_adamw_is_torch_adamw_per_model():
    torch.manual_seed(0)
    weights = [torch.randn(3, 4) for _ in range(2)]
    grads = [[torch.randn(3, 4) for _ in range(2)] for _ in range(5)]
    settings = [(1e-2, 0.1), (3e-3, 0.0)]
    stacked = {"w": torch.stack(weights).requires_grad_()}
    ours = training.StackedAdamW(stacked, [s[0] for s in settings], [s[1] for s in settings])
    theirs = [torch.nn.Parameter(w.clone()) for w in weights]
    optimizers = [torch.optim.AdamW([p], lr=lr, weight_decay=wd) for p, (lr, wd) in zip(theirs, settings)]
    for step_grads in grads:
        stacked["w"].grad = torch.stack(step_grads)
        ours.step(torch.tensor([True, True]))
        for p, g, opt in zip(theirs, step_grads, optimizers):
            p.grad = g.clone()
            opt.step()
    for k in range(2):
        assert torch.allclose(stacked["w"][k], theirs[k], atol=1e-7, rtol=1e-6)
    frozen = stacked["w"].detach().clone()
    stacked["w"].grad = torch.ones_like(frozen)
    ours.step(torch.tensor([False, True]))
    assert torch.equal(stacked["w"][0], frozen[0]) and not torch.equal(stacked["w"][1], frozen[1])


def test_divergence_ends_cleanly_with_the_last_good_weights():
    model, recorder = small(), Recorder()
    result = train(model, "parity", TrainConfig(n=5, batch_size=32, steps=50, lr=1e5, eval_interval=5), [recorder])
    assert result.stop_reason.startswith("diverged: non-finite training loss")
    assert f"restored to those after step {result.steps}" in result.stop_reason
    assert result.steps < 50
    assert params_equal(model, recorder.weights[result.steps])
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert result.final["step"] == result.steps and math.isfinite(result.final["eval_loss"])


def test_a_diverging_model_in_a_batch_leaves_the_others_alone():
    configs = seeded(TrainConfig(n=5, batch_size=32, steps=30, lr=3e-3, eval_interval=10), [0, 1])
    configs[1] = replace(configs[1], lr=1e5)
    models = [small(seed=0), small(seed=1)]
    results = train_many(models, "first", configs)
    assert results[0].stop_reason == "completed" and results[1].stop_reason.startswith("diverged")
    assert all(torch.isfinite(p).all() for p in models[1].parameters())
    alone = small(seed=0)
    expected = train(alone, "first", configs[0])
    assert results[0].final["eval_loss"] == pytest.approx(expected.final["eval_loss"], rel=1e-4, abs=1e-7)


@pytest.mark.parametrize("targets", [{"target_accuracy": 1.0}, {"target_loss": 0.01},
                                     {"target_accuracy": 1.0, "target_loss": 0.01}])
def test_early_stopping_once_every_target_is_met(targets):
    model = small(n=4)
    config = TrainConfig(n=4, batch_size=64, steps=3000, lr=3e-3, eval_interval=10, **targets)
    result = train(model, "first", config)
    assert result.stop_reason == "early_stop"
    assert result.steps < 3000 and result.steps % 10 == 0 and result.final["step"] == result.steps

    def met(record):
        return (record["eval_accuracy"] >= targets.get("target_accuracy", 0)
                and record["eval_loss"] <= targets.get("target_loss", math.inf))

    assert met(result.final) and not any(met(r) for r in result.history[:-1])


def test_relax_steps_stops_that_many_steps_after_the_targets_are_first_met():
    targets = {"target_accuracy": 1.0, "target_loss": 0.01}
    configs = seeded(TrainConfig(n=4, batch_size=64, steps=3000, lr=3e-3, eval_interval=10, relax_steps=55, **targets),
                     [0, 1])
    results = train_many([small(n=4, seed=0), small(n=4, seed=1)], "first", configs)
    for result in results:
        met = [r["step"] for r in result.history if r["eval_accuracy"] >= 1.0 and r["eval_loss"] <= 0.01]
        assert result.stop_reason == "relaxed" and result.converged_step == met[0] and met[0] % 10 == 0
        assert result.steps == result.converged_step + 55 < 3000
        assert result.final["step"] == result.steps  # the relaxed weights have their own final record
        assert result.summary()["converged_step"] == result.converged_step
    alone = train(small(n=4, seed=1), "first", configs[1])
    assert (alone.converged_step, alone.steps) == (results[1].converged_step, results[1].steps)


def test_relax_steps_needs_the_targets():
    with pytest.raises(ValueError, match="give target_accuracy and/or target_loss"):
        TrainConfig(n=4, relax_steps=100)


class InputRecorder(sv.EncoderTransformer):
    """Records the vertex of every string it is trained on (forward passes with gradients)."""

    seen: list

    def forward(self, bits):
        if torch.is_grad_enabled():
            self.seen.append(cube.vertex_index(bits))
        return super().forward(bits)


def test_a_restricted_training_set_is_all_the_model_ever_trains_on():
    n, size = 6, 12
    model = InputRecorder(sv.EncoderConfig(**SMALL, max_len=n))
    model.seen = []
    config = TrainConfig(n=n, batch_size=32, steps=60, lr=3e-3, train_size=size, train_set_seed=5, eval_interval=20)
    result = train(model, "random:seed=1", config)
    train_set = TrainingData(config).train_set
    assert len(train_set) == size and len(set(train_set.tolist())) == size
    seen = torch.cat(model.seen)
    assert len(seen) == 60 * 32
    assert set(seen.tolist()) == set(train_set.tolist())  # only those, and (in 1920 draws) all of them
    assert torch.equal(TrainingData(replace(config, seed=9)).train_set, train_set)  # fixed by train_set_seed
    assert {"eval_accuracy", "heldout_accuracy", "heldout_loss"} <= set(result.final)
    data = TrainingData(config)
    assert not set(data.heldout.tolist()) & set(train_set.tolist()) and len(data.heldout) == 2**n - size


def test_a_restricted_set_larger_than_eval_size_is_evaluated_on_a_sample_of_it():
    """An evaluation costs at most eval_size strings whatever the training set: the set's first eval_size
    strings (of its random order), all of them in the set; a set within eval_size is evaluated whole."""
    config = TrainConfig(n=8, train_size=200, eval_size=50)
    data = TrainingData(config)
    (evaluated,) = data.eval_sets()["eval"]
    assert torch.equal(evaluated, sv.cube.vertex_bits(data.train_set[:50], 8))
    (whole,) = TrainingData(replace(config, eval_size=200)).eval_sets()["eval"]
    assert torch.equal(whole, sv.cube.vertex_bits(data.train_set, 8))


def test_full_batch_trains_every_step_on_the_whole_cube_or_the_whole_set():
    n = 5
    model = InputRecorder(sv.EncoderConfig(**SMALL, max_len=n))
    model.seen = []
    train(model, "parity", TrainConfig(n=n, batch_size=2**n, full_batch=True, steps=3, eval_interval=3))
    assert len(model.seen) == 3 and all(torch.equal(seen, torch.arange(2**n)) for seen in model.seen)
    config = TrainConfig(n=n, batch_size=12, full_batch=True, train_size=12, steps=2, eval_interval=2)
    model.seen = []
    train(model, "parity", config)
    train_set = TrainingData(config).train_set
    assert len(model.seen) == 2 and all(torch.equal(seen, train_set) for seen in model.seen)


def test_callbacks_fire_at_the_right_steps_and_can_stop_a_run():
    recorder = Recorder()
    train(small(), "first", TrainConfig(n=5, batch_size=16, steps=25, eval_interval=10), [recorder])
    assert recorder.calls[0] == ("start", 0)
    assert [c[1] for c in recorder.calls if c[0] == "step"] == list(range(1, 26))
    assert [c[1] for c in recorder.calls if c[0] == "eval"] == [0, 10, 20, 25]
    assert recorder.calls[-1] == ("end", 25)
    assert recorder.calls.index(("eval", 10)) == recorder.calls.index(("step", 10, 5)) + 1

    model, stopper = small(), Recorder(stop_at=7)
    result = train(model, "first", TrainConfig(n=5, batch_size=16, steps=25, eval_interval=10), [stopper])
    assert result.stop_reason == "stopped by callback" and result.steps == 7
    assert [r["step"] for r in result.history] == [0, 7]  # a final record of the weights kept
    assert params_equal(model, stopper.weights[7])


def test_mixed_length_training_cycles_through_the_lengths():
    recorder = Recorder()
    model = small(n=6)
    result = train(model, "first", TrainConfig(n=6, min_n=3, batch_size=16, steps=8, eval_interval=4), [recorder])
    assert [c[2] for c in recorder.calls if c[0] == "step"] == [3, 4, 5, 6, 3, 4, 5, 6]
    per_length = [training.evaluate(model, "first", cube.vertices(n), sv.ZERO_ONE)["loss"] for n in (3, 4, 5, 6)]
    assert result.final["eval_loss"] == pytest.approx(sum(per_length) / 4, rel=1e-6)


@pytest.mark.parametrize("fields,message", [
    ({"lr": 0.0}, "lr must be"),
    ({"lr": float("nan")}, "lr must be"),
    ({"weight_decay": -1.0}, "weight_decay"),
    ({"steps": 0}, "steps must be"),
    ({"batch_size": 2.5}, "batch_size must be"),
    ({"min_n": 9}, "min_n=9 is larger"),
    ({"train_size": 300}, "more than the 2**8"),
    ({"train_size": 10, "min_n": 4}, "one length"),
    ({"full_batch": True, "batch_size": 100}, "set batch_size to 256, not 100"),
    ({"full_batch": True, "batch_size": 10, "train_size": 12}, "set batch_size to 12, not 10"),
    ({"full_batch": True, "batch_size": 256, "min_n": 4}, "one length"),
    ({"target_accuracy": 1.5}, "target_accuracy"),
    ({"target_loss": 0.0}, "target_loss"),
    ({"loss": "hinge"}, "loss must be one of mse, bce"),
    ({"n": True}, "n must be an int"),
    ({"seed": 10**29}, "seed must be"),
    ({"lr": 1e38}, "lr must be"),
    ({"batch_size": 10**9}, "batch_size must be"),
    ({"loss": "bce", "pm1_targets": True}, "pm1_targets goes with mse"),
    ({"device": "toaster"}, "unknown device"),
])
def test_bad_configs_are_refused_with_a_clear_message(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TrainConfig(**{"n": 8, **fields})


def test_configs_that_do_not_fit_the_model_or_task_are_refused():
    with pytest.raises(ValueError, match="max_len=5"):
        train(small(n=5), "parity", TrainConfig(n=8, steps=1))
    with pytest.raises(ValueError, match="real-valued"):
        train(small(), "mean", TrainConfig(n=5, steps=1, target_accuracy=0.9))
    with pytest.raises(ValueError, match="computes PARITY"):
        train(small("scratchpad"), "first", TrainConfig(n=5, steps=1))
    with pytest.raises(ValueError, match="differ only in"):
        train_many([small(), small(seed=1)], "first", [TrainConfig(n=5, batch_size=8), TrainConfig(n=5, batch_size=16)])
    with pytest.raises(ValueError, match="one architecture and config"):
        train_many([small(), small(d_model=16)], "first", TrainConfig(n=5))


def test_checkpoint_keeps_the_history_and_same_run_same_bytes(tmp_path, monkeypatch):
    config = TrainConfig(n=5, batch_size=16, steps=20, eval_interval=5)
    paths = []
    for i in range(2):
        result = train(small(), "parity", config)
        paths.append(result.save(tmp_path / f"m{i}.safetensors", with_time=False))
    assert paths[0].read_bytes() == paths[1].read_bytes()
    ck = sv.load_checkpoint(paths[0])
    assert ck.task == sv.get_task("parity") and ck.n == 5
    meta = ck.metadata["training"]
    assert meta["history"] == result.history and meta["stop_reason"] == result.stop_reason and meta["steps"] == 20
    assert meta["config"] == config.to_dict() and "wall_time_s" not in meta
    assert "wall_time_s" in sv.load_checkpoint(result.save(tmp_path / "t.safetensors")).metadata["training"]

    monkeypatch.setattr(training, "HISTORY_METADATA_CAP", 100)  # a long history goes to a side file
    path = result.save(tmp_path / "big.safetensors")
    meta = sv.load_checkpoint(path).metadata["training"]
    side = tmp_path / meta["history_file"]["name"]
    assert "history" not in meta and json.loads(side.read_text()) == result.history


def test_a_run_that_learns_nothing_says_so():
    # lr = 10 jumps around without learning PARITY: the loss stays at a constant prediction's
    result = train(small(), "parity", TrainConfig(n=5, batch_size=32, steps=40, lr=10.0, eval_interval=20))
    assert result.stop_reason.startswith("learned nothing: the final evaluation loss")
    assert training.constant_loss(torch.tensor([0.0, 1.0, 1.0, 0.0]), sv.ZERO_ONE, "mse") == pytest.approx(0.25)
    assert training.constant_loss(torch.tensor([0.0, 1.0]), sv.tasks.LOGIT, "bce") == pytest.approx(math.log(2))
    learned = train(small(), "first", TrainConfig(n=5, batch_size=32, steps=200, lr=3e-3, eval_interval=50))
    assert learned.stop_reason == "completed"
