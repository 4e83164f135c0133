"""Kept models on the server's disk: random tokens, owners, the size cap, deletion."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sensviz as sv  # noqa: E402
from sensviz.kept import TOKEN, KeptStore  # noqa: E402


@pytest.fixture
def checkpoint() -> bytes:
    return sv.checkpoint_bytes(sv.build_model("formal", d_model=8, n_heads=2, max_len=4, seed=0), task="first", n=4)


def test_keep_read_and_list_by_owner(tmp_path, checkpoint):
    store = KeptStore(tmp_path, cap=10 * 2**20)
    mine = store.keep("trained", "first-n4", checkpoint, owner="alice")
    theirs = store.keep("upload", "x.safetensors", checkpoint, owner="bob", overrides={"n_heads": 2, "task": None})
    assert TOKEN.match(mine.token) and mine.token != theirs.token  # random, although the bytes are equal
    assert store.data(mine.token) == checkpoint
    assert sv.load_checkpoint(store.data(mine.token)).task.label == "first"
    assert [k.token for k in store.owned("alice")] == [mine.token]  # bob's model is not listed to alice
    assert store.info(theirs.token).overrides == {"n_heads": 2}
    assert store.info(theirs.token).owner == "bob"  # but a link to it finds it


def test_only_the_owner_deletes(tmp_path, checkpoint):
    store = KeptStore(tmp_path, cap=10 * 2**20)
    kept = store.keep("trained", "m", checkpoint, owner="alice")
    assert not store.delete(kept.token, "bob")
    assert store.info(kept.token) is not None
    assert store.delete(kept.token, "alice")
    assert store.info(kept.token) is None
    with pytest.raises(KeyError):
        store.data(kept.token)


def test_the_oldest_are_evicted_over_the_cap(tmp_path, checkpoint):
    store = KeptStore(tmp_path, cap=int(2.5 * len(checkpoint)))
    tokens = [store.keep("trained", f"m{i}", checkpoint, owner="alice").token for i in range(4)]
    assert [store.info(t) is not None for t in tokens] == [False, False, True, True]
    assert store.total() <= store.cap
    with pytest.raises(ValueError, match="more than the server keeps"):
        KeptStore(tmp_path / "small", cap=10).keep("upload", "big.safetensors", checkpoint, owner="alice")


@pytest.mark.parametrize("token", ["", "short", "../../etc/passwd", "a" * 65, "abc/def" * 4, None])
def test_bad_tokens_open_no_file(tmp_path, token):
    store = KeptStore(tmp_path, cap=2**20)
    assert store.info(token) is None
    with pytest.raises(KeyError):
        store.data(token)
