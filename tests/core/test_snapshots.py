"""A run stopped after any step goes on from its snapshot exactly as it would have gone on: the same weights, records
and ending, bit for bit; a snapshot of another run, or a file that is not one, is refused with one line."""

from dataclasses import replace

import pytest
import torch
from helpers.core import SnapshotAt

import sensviz as sv
from sensviz.snapshots import Snapshot
from sensviz.training import Callback, TrainConfig, seeded, train, train_many

SMALL = {"d_model": 8, "n_layers": 1, "n_heads": 2}


def small(n=5, seed=0):
    return sv.build_model("encoder", seed=seed, **SMALL, max_len=n)


class Steps(Callback):
    """The steps and evaluations a run's callbacks see after its start."""

    def __init__(self):
        self.calls = []

    def on_step(self, state):
        self.calls.append(("step", state.step, state.n, state.loss))

    def on_eval(self, state, record):
        self.calls.append(("eval", record["step"]))

    def on_end(self, state, result):
        self.calls.append(("end", result.steps))


CASES = {
    "between evaluations": ("majority", TrainConfig(n=5, batch_size=32, steps=40, lr=2e-3, eval_interval=10), 17),
    "at an evaluation": ("majority", TrainConfig(n=5, batch_size=32, steps=40, lr=2e-3, eval_interval=10), 20),
    "at the last step": ("parity", TrainConfig(n=5, batch_size=32, steps=30, lr=2e-3, eval_interval=7), 30),
    "mixed lengths": ("parity", TrainConfig(n=5, min_n=3, batch_size=16, steps=36, lr=3e-3, eval_interval=6), 13),
    "restricted set": ("first", TrainConfig(n=5, train_size=12, batch_size=8, steps=30, lr=3e-3, eval_interval=5), 11),
    "relaxing after the targets": ("first", TrainConfig(n=4, batch_size=64, steps=3000, lr=3e-3, eval_interval=10,
                                                        target_accuracy=1.0, target_loss=0.01, relax_steps=55), None),
}


@pytest.mark.parametrize("case", CASES)
def test_a_resumed_run_is_the_uninterrupted_run_bit_for_bit(case, tmp_path):
    task, config, at = CASES[case]
    whole, seen = small(config.n), Steps()
    expected = train(whole, task, config, [seen])
    at = at or expected.converged_step + 20  # relaxing: after the targets were met, before the run ends
    train(small(config.n), task, config, [SnapshotAt(at, tmp_path / "run.snapshot")])  # ends after step `at`
    resumed, seen_again = small(config.n, seed=99), Steps()  # other initial weights: the snapshot's replace them
    got = train(resumed, task, config, [seen_again], resume=Snapshot.load(tmp_path / "run.snapshot"))
    assert all(torch.equal(p, q) for p, q in zip(whole.parameters(), resumed.parameters()))
    assert got.history == expected.history
    assert (got.stop_reason, got.steps, got.converged_step) == (expected.stop_reason, expected.steps, expected.converged_step)
    after = [call[:2] for call in seen.calls].index(("step", at)) + 1
    assert seen_again.calls == seen.calls[after:]  # the callbacks see the rest of the run, nothing twice
    if case == "relaxing after the targets":
        assert expected.stop_reason == "relaxed" and expected.converged_step < at < expected.steps


def test_a_snapshot_of_another_run_or_another_file_is_refused(tmp_path):
    config = TrainConfig(n=5, batch_size=32, steps=20, lr=2e-3, eval_interval=5)
    train(small(), "majority", config, [SnapshotAt(8, tmp_path / "run.snapshot")])
    snap = Snapshot.load(tmp_path / "run.snapshot")
    with pytest.raises(ValueError, match=r"other settings \(lr\)"):
        train(small(), "majority", replace(config, lr=1e-3), resume=snap)
    with pytest.raises(ValueError, match="does not fit this model"):
        train(sv.build_model("encoder", d_model=16, n_layers=1, n_heads=2, max_len=5), "majority", config, resume=snap)
    (tmp_path / "text.snapshot").write_text("not a snapshot")
    with pytest.raises(ValueError, match="not a training snapshot"):
        Snapshot.load(tmp_path / "text.snapshot")
    torch.save({"format": 0, "step": 3}, tmp_path / "old.snapshot")
    with pytest.raises(ValueError, match="not a training snapshot of format"):
        Snapshot.load(tmp_path / "old.snapshot")


def test_a_stacked_run_has_no_snapshot():
    class Ask(Callback):
        def on_step(self, state):
            state.snapshot()

    config = TrainConfig(n=4, batch_size=8, steps=3, lr=1e-3, eval_interval=1)
    with pytest.raises(ValueError, match="one-model run"):
        train_many([small(4, 0), small(4, 1)], "first", seeded(config, [0, 1]), [Ask()])


def test_a_snapshot_file_of_the_wrong_types_is_refused(tmp_path):
    config = TrainConfig(n=5, batch_size=32, steps=20, lr=2e-3, eval_interval=5)
    train(small(), "majority", config, [SnapshotAt(8, tmp_path / "run.snapshot")])
    data = torch.load(tmp_path / "run.snapshot", weights_only=True)
    torch.save({**data, "step": "8"}, tmp_path / "odd.snapshot")
    with pytest.raises(ValueError, match="wrong types of step"):
        Snapshot.load(tmp_path / "odd.snapshot")
