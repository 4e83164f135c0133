import pytest
import torch
from helpers.core import Threshold

from sensviz import cube, tasks
from sensviz.tasks import get_task


def test_definitions_on_examples():
    bits = torch.tensor([[1, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1]])
    assert get_task("parity")(bits).tolist() == [1, 0, 1, 0]
    assert get_task("majority")(bits).tolist() == [1, 0, 0, 1]  # the tie 0011 gives 0
    assert get_task("first")(bits).tolist() == [1, 0, 0, 1]
    assert get_task("mean")(bits).tolist() == [0.75, 0.5, 0.25, 1.0]
    assert not get_task("mean").boolean and get_task("parity").boolean


def test_sparse_parity_uses_seeded_positions():
    task = get_task("sparse_parity:k=3,seed=5")
    positions = task.positions(10)
    assert len(positions) == 3 and positions == task.positions(10)
    bits = cube.vertices(10)
    expected = bits[:, positions].sum(dim=1) % 2
    assert torch.equal(task(bits), expected.float())


def test_random_function_is_seeded_table_in_vertex_order():
    task = get_task("random:seed=3")
    table = task.values(6)
    assert torch.equal(table, get_task("random:seed=3").values(6))
    assert not torch.equal(table, get_task("random:seed=4").values(6))
    assert set(table.unique().tolist()) == {0.0, 1.0}
    # vertex 0b101101 has position 0 as its most significant bit
    bits = torch.tensor([[1, 0, 1, 1, 0, 1]])
    assert task(bits).item() == table[0b101101].item()


def test_truth_table_task():
    task = get_task("table:0110")
    assert task.n == 2
    assert task(cube.vertices(2)).tolist() == [0, 1, 1, 0]
    with pytest.raises(ValueError, match="only for n=2"):
        task.values(3)
    with pytest.raises(ValueError, match="power of two"):
        get_task("table:011")


@pytest.mark.parametrize("label", ["parity", "majority", "first", "mean", "sparse_parity:k=2,seed=1", "random:seed=7",
                                   "table:1000"])
def test_labels_and_specs_round_trip(label):
    task = get_task(label)
    assert task.label == label
    assert tasks.task_from_spec(task.spec()) == task


@pytest.mark.parametrize("label", ["parityy", "parity:k=2", "sparse_parity:k=x", "sparse_parity:q=1", "random:seed"])
def test_bad_labels_give_value_errors(label):
    with pytest.raises(ValueError):
        get_task(label)


def test_target_encodings():
    out = torch.tensor([0.2, 0.7])
    assert tasks.ZERO_ONE.to_pm1(out).tolist() == pytest.approx([-0.6, 0.4])
    assert tasks.ZERO_ONE.decide(out).tolist() == [0, 1]
    assert tasks.PM1.decide(torch.tensor([-0.1, 0.3])).tolist() == [0, 1]
    assert tasks.PM1.encode(torch.tensor([0.0, 1.0])).tolist() == [-1, 1]


def test_logit_encoding_and_losses():
    from sensviz import losses

    out = torch.tensor([-2.0, 0.0, 3.0])
    assert tasks.LOGIT.to_pm1(out).tolist() == pytest.approx((2 * torch.sigmoid(out.double()) - 1).tolist())
    assert tasks.LOGIT.decide(out).tolist() == [0, 0, 1]
    target = torch.tensor([0.0, 1.0, 1.0])
    assert losses.loss_value(out, target, "mse").item() == pytest.approx(((out - target) ** 2).mean().item())
    bce = torch.nn.functional.binary_cross_entropy_with_logits(out, target)
    assert losses.loss_value(out, target, "bce").item() == pytest.approx(bce.item())
    stacked = losses.loss_value(torch.stack([out, out + 1]), target, "mse")  # leading direction dimension
    assert stacked.shape == (2,)
    with pytest.raises(ValueError, match="does not fit"):
        losses.check_loss("bce", tasks.ZERO_ONE)


@pytest.fixture
def registered():
    tasks.register(Threshold)
    yield Threshold
    del tasks.TASKS[Threshold.name]


def test_a_task_defined_elsewhere_is_parsed_validated_and_offered_by_the_cli(registered, capsys):
    from sensviz.cli import main

    task = get_task("threshold_test:level=0.25,note=hi")
    assert task.level == 0.25 and task.note == "hi" and task.label == "threshold_test:level=0.25,note=hi"
    assert tasks.task_from_spec(task.spec()) == task
    for label, message in (("threshold_test:level=2", "must be in 0..1"), ("threshold_test:level=abc", "a number"),
                           ("threshold_test:note=waytoolongtext", "its length must be"),
                           ("threshold_test:depth=1", "has no parameter 'depth'")):
        with pytest.raises(ValueError, match=message):
            get_task(label)
    assert main(["task-info", "--task", "threshold_test:level=0.5", "--n", "3"]) == 0
    assert capsys.readouterr().out.count('"avg_sensitivity"') == 1
    assert main(["train", "--help"]) == 0
    assert "threshold_test:level=<float 0..1>,note=<length ..8>" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("label,message", [("random:seed=100000000000000000000000000000", "seed"),
                                           ("sparse_parity:k=0", "k"), ("table:", "length")])
def test_parameters_out_of_range_are_refused(label, message):
    with pytest.raises(ValueError, match=message):
        get_task(label)
