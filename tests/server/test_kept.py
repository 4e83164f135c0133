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
from server import limits as server_limits  # noqa: E402
from server.kept import TOKEN, KeptRefused, KeptStore, KeptUnreadable  # noqa: E402
from server.limits import DAY_S, MiB  # noqa: E402


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


def test_one_file_kept_again_under_other_metadata_is_one_model_of_its_owner_only(tmp_path, checkpoint):
    store = KeptStore(tmp_path, cap=10 * 2**20)
    first = store.keep("upload", "f.safetensors", checkpoint, owner="alice", overrides={"n": 4})
    assert store.keep("upload", "f.safetensors", checkpoint, owner="alice", overrides={"n": 4}) == first
    used = store.usage("alice")
    for n in range(1, 40):  # the flood: one small file kept again with another "Trained input length n"
        again = store.keep("upload", f"f{n}.safetensors", checkpoint, owner="alice", overrides={"n": n})
        assert again.token == first.token
    assert [(k.name, k.overrides) for k in store.owned("alice")] == [("f39.safetensors", {"n": 39})]  # the latest
    assert abs(store.usage("alice") - used) < 64 and len(list(tmp_path.glob("*.json"))) == 1
    assert store.data(first.token) == checkpoint
    trained = store.keep("trained", "run", checkpoint, owner="alice")  # another kind: its own model, one file
    assert trained.token != first.token and len(list(tmp_path.glob("*.safetensors"))) == 1
    bobs = store.keep("upload", "f.safetensors", checkpoint, owner="bob", overrides={"n": 4})
    assert bobs.token not in (first.token, trained.token) and bobs.file != first.file
    assert store.delete(first.token, "alice")
    assert store.data(trained.token) == checkpoint  # the shared file stays while a model uses it
    assert store.delete(trained.token, "alice")
    assert len(list(tmp_path.glob("*.safetensors"))) == 1 and store.data(bobs.token) == checkpoint


def test_identities_from_one_address_share_its_quota_and_push_out_nobody(tmp_path):
    """A browser without a cookie is a new owner: the owners of one address are refused past its quota,
    and a student at another address keeps a model although the store holds the flood."""
    size = 10_000
    store = KeptStore(tmp_path, cap=20 * size, quota=4 * size, address_quota=8 * size, secret=b"s")
    honest = store.keep("upload", "mine.safetensors", b"h" * size, "honest", address="10.0.0.9").token
    refused = 0
    for i in range(20):  # 20 sybils from one address, a model each
        try:
            store.keep("upload", f"s{i}", bytes([i]) * size, f"sybil{i}", address="10.0.0.66")
        except KeptRefused as err:
            assert "SENSVIZ_KEPT_ADDRESS_QUOTA_MB" in str(err) and "\n" not in str(err)
            refused += 1
    held = sum(store.usage(f"sybil{i}") for i in range(20))
    assert held <= store.address_quota and refused >= 12
    assert store.info(honest) is not None
    assert store.keep("upload", "next.safetensors", b"n" * size, "honest", address="10.0.0.9")
    local = [store.keep("upload", f"l{i}", bytes([100 + i]) * size, f"op{i}") for i in range(9)]  # localhost: no address quota
    assert len(local) == 9 and all(k.address == "" for k in local)


def test_a_full_store_makes_room_from_the_largest_holder_and_never_refuses_everyone(tmp_path):
    """Four addresses' floods fill the store, each within its quota: a newcomer (holding nothing) still
    keeps a model, by evicting the least recently opened model of the largest holder; a holder as small as
    the keeper would be is never pushed out."""
    size = 10_000
    store = KeptStore(tmp_path, cap=16 * size, quota=2 * size + 2_000, address_quota=8 * size, secret=b"s")
    for a in range(4):
        for i in range(4):
            with contextlib.suppress(KeptRefused):
                store.keep("upload", f"m{a}{i}", bytes([a * 16 + i]) * size, f"o{a}-{i}", address=f"10.0.{a}.1")
    full = store.total()
    assert full + size > store.cap  # the store is full
    for k in range(5):  # five newcomers, each from an address of its own
        kept = store.keep("upload", f"new{k}", bytes([200 + k]) * size, f"new{k}", address=f"10.9.{k}.1")
        assert store.info(kept.token) is not None
    assert store.total() <= store.cap
    by_address = {}
    for path in tmp_path.glob("*.json"):
        found = store.info(path.stem)
        by_address[found.address] = by_address.get(found.address, 0) + 1
    assert sorted(by_address.values())[-1] <= 4 and len(by_address) == 9
    small = KeptStore(tmp_path / "small", cap=2 * size + 2_000, quota=2 * size, secret=b"s")
    small.keep("upload", "a", b"a" * size, "alice", address="10.0.0.1")
    small.keep("upload", "b", b"b" * size, "bob", address="10.0.0.2")
    with pytest.raises(KeptRefused, match="store is full .* and nobody holds more than you would"):
        small.keep("upload", "c", b"c" * size, "carol", address="10.0.0.3")  # nobody holds more than carol would


def test_a_class_of_60_behind_one_nat_keeps_8_mib_each_under_the_defaults(tmp_path, monkeypatch):
    """The defaults' claim (`server.limits`), scaled by 1,024: on a 1 MiB store the address share holds
    8 KiB (files and metadata) for each of 60 owners of one address."""
    monkeypatch.setenv("SENSVIZ_KEPT_CAP_MB", "1")
    for name in ("SENSVIZ_KEPT_QUOTA_MB", "SENSVIZ_KEPT_ADDRESS_QUOTA_MB", "SENSVIZ_KEPT_CLASS_MB"):
        monkeypatch.delenv(name, raising=False)
    store = KeptStore(tmp_path, secret=b"s")
    assert (store.cap, store.quota, store.address_quota, store.class_cap) == (MiB, MiB // 4, MiB // 2, MiB // 4)
    for i in range(60):
        data = i.to_bytes(2, "big") * 3_900  # 7,800 bytes and about 300 of metadata: 8 KiB
        store.keep("trained", f"student {i}", data, f"student{i}", address="203.0.113.7")
    assert len(list(tmp_path.glob("*.json"))) == 60


def test_the_ray_queues_store_is_built_with_the_same_caps_and_pins(tmp_path, checkpoint):
    from server.classes import ClassStore
    from server.owners import owner_secret

    classes = ClassStore(tmp_path / "classes", owner_secret(tmp_path))
    made = classes.create("Lab", "teacher")
    classes.join(made.code, "Ada", "ada")
    store = KeptStore(tmp_path / "kept", cap=10 * 2**20, quota=2**20, ttl_s=100, classes=tmp_path / "classes")
    kept = store.keep("trained", "a", checkpoint, "ada")
    classes.add_model(made.code, "ada", kept.token, "first", 4, 1.0, "a")
    settings = store.settings()
    actor = KeptStore(**settings)  # what `server.jobs._Queue` builds in the Ray actor's process
    assert actor.settings() == settings and actor.pins() == {kept.token: made.code}
    os.utime(tmp_path / "kept" / f"{kept.token}.json", (1, 1))  # opened long ago: past the TTL
    assert actor.info(kept.token) is not None  # pinned in the actor's store too


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
    monkeypatch.setitem(server_limits.LIMITS, "kept_models", sv.limits.Limit("kept_models", 1, 3, "test"))
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
    from sensviz.text import hidden

    assert not any(hidden(chr(point)) for point in range(128))  # so an ASCII name is kept as it is, at once
    store = KeptStore(tmp_path, cap=2**20)
    assert store.keep("upload", "report\u202egnp\u200b.safetensors", b"x" * 10, "alice").name == "reportgnp.safetensors"
