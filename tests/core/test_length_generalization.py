"""Length generalization: per-length rows equal the per-length measurement, exact or sampled."""

import pytest

import sensviz as sv
from sensviz.length_generalization import length_generalization
from sensviz.measure import MeasureSettings, measure
from sensviz.training import TrainConfig, train


def test_a_mixed_length_first_model_read_at_every_length():
    model = sv.build_model("encoder", d_model=16, n_layers=1, n_heads=2, max_len=8, seed=0)
    train(model, "first", TrainConfig(n=6, min_n=3, batch_size=64, steps=300, lr=3e-3, eval_interval=100))
    fractions = []
    settings = MeasureSettings(exact_limit=7, samples=256)
    rows = length_generalization(model, "first", range(2, 9), trained=range(3, 7), settings=settings,
                                 progress=fractions.append)
    assert [r["n"] for r in rows] == list(range(2, 9))
    assert [r["trained"] for r in rows] == [False, True, True, True, True, False, False]
    assert all(r["accuracy"] == 1.0 for r in rows if r["trained"])
    assert all(r["task_avg_sensitivity"] == pytest.approx(1.0) for r in rows)
    for row in rows:
        expected = measure(model, "first", row["n"], settings, ["sensitivity"]).sensitivity.to_dict()
        assert row == {"n": row["n"], "trained": row["trained"], **expected}
    assert rows[-1]["exact"] is False and rows[-1]["n_samples"] == 256 and rows[-1]["avg_sensitivity_stderr"] > 0
    assert fractions[-1] == 1.0


def test_scratchpad_rows_add_greedy_decoding_accuracy():
    model = sv.build_model("scratchpad", d_model=8, n_layers=1, n_heads=2, max_len=5, seed=0)
    rows = length_generalization(model, "parity", [3, 5])
    assert all(0 <= r["autoregressive_accuracy"] <= 1 and 0 <= r["answer_accuracy"] <= 1 for r in rows)


@pytest.mark.parametrize("lengths,message", [([4, 9], "max_len=8"), ([], "at least one length")])
def test_lengths_outside_the_positional_range_are_refused(lengths, message):
    model = sv.build_model("formal", d_model=8, n_layers=1, n_heads=1, max_len=8, seed=0)
    with pytest.raises(ValueError, match=message):
        length_generalization(model, "parity", lengths)
