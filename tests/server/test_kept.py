"""Kept models on the server's disk: random tokens, owners, deletion, and fair shares of one
disk: a quota per owner (eviction only of the owner's own models), a refusal when the store is
full, expiry of unopened models, one file for equal bytes of one owner, no leftovers of a failed
write, and a store that keeps serving when a file is damaged."""

import contextlib
import errno
import os
import sys
from pathlib import Path

import pytest
from conftest import in_processes

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import sensviz as sv  # noqa: E402
from server import kept as kept_module  # noqa: E402
from server.kept import DAY_S, TOKEN, KeptRefused, KeptStore, KeptUnreadable  # noqa: E402


def model_bytes(seed: int = 0) -> bytes:
    return sv.checkpoint_bytes(sv.build_model("formal", d_model=8, n_heads=2, max_len=4, seed=seed), task="first", n=4)


@pytest.fixture
def checkpoint() -> bytes:
    return model_bytes()


class Clock:
    """A fake time.time for expiry tests."""

    def __init__(self, now: float = 1e9):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_two_processes_keeping_at_once_stay_within_the_cap(tmp_path):
    """Two web servers (or a server and the Ray queue's actor) keep models in one store at the same moment:
    the cap is checked and the files written one keep at a time, so exactly the models that fit are kept."""
    size, fit = 100_000, 6
    cap = fit * size + fit * 2_000  # room for `fit` models and their metadata, not one more

    def keep_many(i: int) -> None:
        store = KeptStore(tmp_path, cap=cap, quota=cap)
        for k in range(2 * fit):
            with contextlib.suppress(KeptRefused):
                store.keep("upload", f"m{k}", bytes(size), owner=f"p{i}-{k}")

    in_processes(keep_many)
    store = KeptStore(tmp_path, cap=cap, quota=cap)
    assert store.total() <= cap and len(list(tmp_path.glob("*.json"))) == fit


def test_keep_read_and_list_by_owner(tmp_path, checkpoint):
    store = KeptStore(tmp_path, cap=10 * 2**20)
    mine = store.keep("trained", "first-n4", checkpoint, owner="alice")
    theirs = store.keep("upload", "x.safetensors", checkpoint, owner="bob", overrides={"n_heads": 2, "task": None})
    assert TOKEN.fullmatch(mine.token) and mine.token != theirs.token  # random, although the bytes are equal
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
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]  # its file went with it (the store's lock stays)
    with pytest.raises(KeyError):
        store.data(kept.token)


def test_one_owner_over_the_quota_evicts_only_their_own_least_recently_opened(tmp_path):
    files = [model_bytes(seed) for seed in range(8)]
    size = len(files[0])
    store = KeptStore(tmp_path, cap=20 * size, quota=int(3.5 * size))
    bobs = store.keep("trained", "bob's", files[0], owner="bob")
    alices = [store.keep("upload", f"a{i}.safetensors", files[i], owner="alice").token for i in range(3)]
    store.data(alices[0])  # opened: now alice's least recently opened model is a1
    for i in range(3, 8):  # the hostile tester: one student keeps many files
        store.keep("upload", f"a{i}.safetensors", files[i], owner="alice")
    assert store.data(bobs.token) == files[0]  # another owner's model is never evicted
    left = {k.name for k in store.owned("alice")}
    assert len(left) == 3 and store.usage("alice") <= store.quota
    assert left == {"a5.safetensors", "a6.safetensors", "a7.safetensors"}
    store.keep("upload", "a0.safetensors", files[0], owner="alice")  # bob holds these bytes: alice gets her own copy
    assert store.info(bobs.token) is not None


def test_the_last_opened_stays_and_a_model_over_the_quota_is_refused(tmp_path):
    files = [model_bytes(seed) for seed in range(3)]
    store = KeptStore(tmp_path, cap=20 * len(files[0]), quota=int(2.5 * len(files[0])))
    first, second = (store.keep("trained", f"m{i}", files[i], owner="alice").token for i in range(2))
    store.data(first)
    store.keep("trained", "m2", files[2], owner="alice")
    assert store.info(first) is not None and store.info(second) is None
    with pytest.raises(KeptRefused, match=r"^big\.safetensors \(\d.* is more than one user may keep on this server"):
        store.keep("upload", "big.safetensors", b"x" * (store.quota + 1), owner="alice")
    small = KeptStore(tmp_path / "small", cap=10)
    with pytest.raises(KeptRefused, match="more than one user may keep"):  # over the whole cap: the quota is at most the cap
        small.keep("upload", "big.safetensors", files[0], owner="alice")


def test_a_full_store_refuses_a_new_model_and_evicts_nobody(tmp_path):
    files = [model_bytes(seed) for seed in range(4)]
    store = KeptStore(tmp_path, cap=int(3.5 * len(files[0])), quota=2 * len(files[0]) + 4096)
    kept = [store.keep("trained", f"m{i}", files[i], owner=owner).token
            for i, owner in enumerate(("alice", "bob", "carol"))]
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(KeptRefused, match=r"^m3 \(.*\) was not kept: the server's model store is full"):
        store.keep("trained", "m3", files[3], owner="dave")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert all(store.info(token) is not None for token in kept)


def test_what_the_owner_holds_elsewhere_counts(tmp_path, checkpoint):
    store = KeptStore(tmp_path, cap=100 * len(checkpoint), quota=10 * len(checkpoint))
    store.elsewhere = lambda owner: 9 * len(checkpoint) + 4096 if owner == "alice" else 0  # e.g. training records
    with pytest.raises(KeptRefused, match="does not fit in your share of the server .*training records included"):
        store.keep("trained", "m", checkpoint, owner="alice")
    assert store.keep("trained", "m", checkpoint, owner="bob")


def test_equal_bytes_share_one_file_within_one_owner_only(tmp_path, checkpoint):
    store = KeptStore(tmp_path, cap=10 * 2**20)
    first = store.keep("upload", "f.safetensors", checkpoint, owner="alice", overrides={"n": 4})
    assert store.keep("upload", "f.safetensors", checkpoint, owner="alice", overrides={"n": 4}) == first
    used = store.usage("alice")
    other_n = store.keep("upload", "f.safetensors", checkpoint, owner="alice", overrides={"n": 3})
    assert other_n.token != first.token and other_n.file == first.file
    assert store.usage("alice") - used < 1024  # only the new metadata
    assert len(list(tmp_path.glob("*.safetensors"))) == 1
    bobs = store.keep("upload", "f.safetensors", checkpoint, owner="bob", overrides={"n": 4})
    assert bobs.token not in (first.token, other_n.token) and bobs.file != first.file
    assert store.delete(first.token, "alice")
    assert store.data(other_n.token) == checkpoint  # the shared file stays while a model uses it
    assert store.delete(other_n.token, "alice")
    assert len(list(tmp_path.glob("*.safetensors"))) == 1 and store.data(bobs.token) == checkpoint


def test_models_not_opened_within_the_ttl_expire(tmp_path, checkpoint):
    clock = Clock()
    store = KeptStore(tmp_path, cap=10 * 2**20, ttl_s=2 * DAY_S, clock=clock)
    opened = store.keep("trained", "opened", checkpoint, owner="alice").token
    forgotten = store.keep("trained", "forgotten", model_bytes(1), owner="alice").token
    clock.now += 1.5 * DAY_S
    store.data(opened)  # opening restarts its clock
    clock.now += 1.0 * DAY_S
    assert store.info(forgotten) is None and store.info(opened) is not None
    assert [k.token for k in store.owned("alice")] == [opened]
    KeptStore(tmp_path, cap=10 * 2**20, ttl_s=2 * DAY_S, clock=clock)  # a server start sweeps the expired files
    assert sorted(p.stem for p in tmp_path.glob("[!.]*")) == sorted([opened, store.info(opened).file])


def test_a_failed_write_leaves_nothing_and_temporaries_go_at_start(tmp_path, checkpoint, monkeypatch):
    store = KeptStore(tmp_path, cap=10 * 2**20)
    store.keep("trained", "m0", checkpoint, owner="alice")
    before = sorted(p.name for p in tmp_path.iterdir())
    real = kept_module.write_atomic
    calls = []

    def disk_full_on_metadata(path, data):
        calls.append(path)
        if path.suffix == ".json":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    monkeypatch.setattr(kept_module, "write_atomic", disk_full_on_metadata)
    with pytest.raises(KeptRefused, match=r"^m1 was not kept: the server could not write it \(No space left on device\)$"):
        store.keep("trained", "m1", model_bytes(1), owner="alice")
    assert len(calls) == 2 and sorted(p.name for p in tmp_path.iterdir()) == before  # the data file written first went too
    monkeypatch.undo()
    (tmp_path / ".abc.safetensors.0123abcd.tmp").write_bytes(b"x" * 1000)  # a crash in the middle of a write
    assert store.total() > sum(p.stat().st_size for p in tmp_path.iterdir() if not p.name.endswith(".tmp"))  # counted
    KeptStore(tmp_path, cap=10 * 2**20)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_file_replaced_by_a_directory_is_unreadable_and_the_store_serves_on(tmp_path, checkpoint):
    store = KeptStore(tmp_path, cap=10 * 2**20)
    broken = store.keep("trained", "broken", checkpoint, owner="alice")
    data_file = tmp_path / f"{broken.file}.safetensors"
    data_file.unlink()
    data_file.mkdir()
    (data_file / "inside").write_bytes(b"x")
    with pytest.raises(KeptUnreadable, match="^kept model unreadable"):
        store.data(broken.token)
    assert [k.name for k in store.owned("alice")] == ["broken"]
    other = store.keep("trained", "other", model_bytes(1), owner="alice")
    assert store.data(other.token) == model_bytes(1)
    assert store.delete(broken.token, "alice") and not data_file.exists()


def test_a_long_name_is_stored_shortened(tmp_path, checkpoint):
    store = KeptStore(tmp_path, cap=10 * 2**20)
    name = "table:" + "01" * 2**20
    kept = store.keep("trained", name, checkpoint, owner="alice")
    assert len(kept.name) <= sv.limits.LIMITS["label_chars"].high
    assert kept.name.startswith("table:0101") and "(2,097,158 chars)#" in kept.name
    assert store.usage("alice") < len(checkpoint) + 2048


def test_a_count_limit_per_owner_and_small_metadata_keep_listings_cheap(tmp_path, monkeypatch):
    monkeypatch.setitem(sv.limits.LIMITS, "kept_models", sv.limits.Limit("kept_models", 1, 3, "test"))
    store = KeptStore(tmp_path, cap=10 * 2**20)
    bobs = store.keep("upload", "b", b"bob's bytes", owner="bob").token
    for i in range(5):
        store.keep("upload", f"a{i}", f"alice {i}".encode(), owner="alice")
    assert [k.name for k in store.owned("alice")] == ["a4", "a3", "a2"] and store.info(bobs) is not None
    with pytest.raises(KeptRefused, match=r"more than 65,536 \(limit 'kept_meta_bytes'\)$"):
        store.keep("upload", "t", b"x", owner="alice", overrides={"task": "table:" + "01" * 2**16})
    parses = []
    real = kept_module.json.loads
    monkeypatch.setattr(kept_module.json, "loads", lambda text: parses.append(1) or real(text))
    store.owned("alice")
    assert parses == []  # every metadata file was parsed once already


@pytest.mark.parametrize("token", ["", "short", "../../etc/passwd", "a" * 65, "abc/def" * 4, None])
def test_bad_tokens_open_no_file(tmp_path, token):
    store = KeptStore(tmp_path, cap=2**20)
    assert store.info(token) is None
    with pytest.raises(KeyError):
        store.data(token)


@pytest.mark.parametrize("replace", ["fifo", "link to /dev/zero", "longer file"])
def test_a_kept_file_replaced_on_the_server_is_refused_in_one_line_without_reading_it(tmp_path, replace):
    store = KeptStore(tmp_path, cap=2**20)
    kept = store.keep("upload", "m.safetensors", b"x" * 100, "alice")
    path = tmp_path / f"{kept.file}.safetensors"
    path.unlink()
    if replace == "fifo":
        os.mkfifo(path)  # a read would wait for a writer forever
    elif replace == "link to /dev/zero":
        path.symlink_to("/dev/zero")  # a read would never end
    else:
        path.write_bytes(b"x" * 101)
    with pytest.raises(KeptUnreadable) as refused:
        store.data(kept.token)
    assert "\n" not in str(refused.value) and "cannot be opened" in str(refused.value)


def test_a_kept_name_loses_its_hidden_characters(tmp_path):
    store = KeptStore(tmp_path, cap=2**20)
    assert store.keep("upload", "report\u202egnp\u200b.safetensors", b"x" * 10, "alice").name == "reportgnp.safetensors"
