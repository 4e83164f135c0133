"""The explorer's plumbing without a page: model links, the cache store's keys and per-key locks,
and the one page list that the README's table follows."""

import os
import re
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["SENSVIZ_DATA_DIR"] = tempfile.mkdtemp(prefix="sensviz-urltest-")

import sensviz as sv  # noqa: E402
from server import services  # noqa: E402
from ui import cache, experiments, memo, model_refs, nav  # noqa: E402
from ui.memo import Store  # noqa: E402

CEILING_S = 120


# ----------------------------------------------------------------------------- model links


def test_a_zoo_link_is_pinned_to_the_checkpoint_content():
    ref, warning = model_refs.resolve("encoder-parity-n8")
    digest = sv.checkpoints.file_hash(ROOT / "checkpoints" / "encoder-parity-n8.safetensors")
    assert ref.kind == "zoo" and ref.digest == digest and warning is None
    assert ref.param == f"encoder-parity-n8~{digest[:12]}"
    assert model_refs.resolve(ref.param) == (ref, None)
    assert model_refs.resolve("encoder-parity-n8.safetensors")[0] == ref
    stale, warning = model_refs.resolve("encoder-parity-n8~000000000000")
    assert stale == ref and "rebuilt since this link was made" in warning


def test_a_kept_model_link_names_its_kind_and_token():
    model = sv.build_model("formal", d_model=8, n_heads=2, max_len=4, seed=0)
    kept = services.kept_store().keep("trained", "run", sv.checkpoint_bytes(model, task="first", n=4), owner="alice")
    ref, _ = model_refs.resolve(f"trained:{kept.token}")
    assert ref.param == f"trained:{kept.token}" and ref.name == "run"
    assert cache.load(ref).task.label == "first"  # validated like any upload
    with pytest.raises(ValueError, match="no kept model"):
        model_refs.resolve(f"upload:{kept.token}")  # the wrong kind


@pytest.mark.parametrize("value, message", [
    ("no-such", "no pretrained checkpoint"), ("../checkpoints/x", "not a checkpoint name"), ("", "not a checkpoint name"),
    ("trained:../../x", "no kept model"), ("zoo:encoder-parity-n8", "not a kind of model"),
])
def test_bad_model_links_say_why(value, message):
    with pytest.raises(ValueError, match=message):
        model_refs.resolve(value)


def test_a_kept_model_whose_bytes_changed_is_refused(tmp_path):
    model = sv.build_model("formal", d_model=8, n_heads=2, max_len=4, seed=1)  # not the bytes alice kept above
    store = services.kept_store()
    kept = store.keep("trained", "run", sv.checkpoint_bytes(model, task="first", n=4), owner="alice")
    ref, _ = model_refs.resolve(f"trained:{kept.token}")
    path = store.root / f"{kept.file}.safetensors"
    size = path.stat().st_size
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all".ljust(size, b" "))  # the same size
    with pytest.raises(sv.CheckpointError, match="changed since it was selected"):
        cache.load(ref)
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")  # another size: not even read
    with pytest.raises(sv.CheckpointError, match="replaced on the server"):
        cache.load(ref)
    store.delete(kept.token, "alice")
    with pytest.raises(sv.CheckpointError, match="the model is gone"):
        cache.load(ref)


# ----------------------------------------------------------------------------- the cache store


def test_a_missed_key_is_computed_once_while_others_wait():
    store = Store(max_entries=8)
    calls, started, release = [], threading.Event(), threading.Event()

    def compute():
        calls.append(1)
        started.set()
        assert release.wait(CEILING_S)
        return object()

    results = []
    threads = [threading.Thread(target=lambda: results.append(store.get_or_compute(("f", 1), compute))) for _ in range(16)]
    for thread in threads:
        thread.start()
    try:
        assert started.wait(CEILING_S)
        assert store.get_or_compute(("g", 1), lambda: "other key") == "other key"  # not blocked by the missed key
    finally:
        release.set()
        for thread in threads:
            thread.join(CEILING_S)
    assert len(calls) == 1 and len(results) == 16 and len({id(r) for r in results}) == 1
    assert store.computed == {"f": 1, "g": 1} and not store.key_locks


def test_a_failed_computation_is_not_kept_and_the_store_is_bounded():
    store = Store(max_entries=2)
    with pytest.raises(RuntimeError):
        store.get_or_compute(("f", 1), lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert store.get_or_compute(("f", 1), lambda: 1) == 1
    store.get_or_compute(("f", 2), lambda: 2)
    store.get_or_compute(("f", 1), lambda: "recomputed")  # touched: the most recent
    store.get_or_compute(("f", 3), lambda: 3)
    assert list(store.values) == [("f", 1), ("f", 3)]


def test_a_store_bounded_by_weight_drops_the_least_recent_first():
    store = Store(max_weight=10, weigh=len)
    for key, value in (("a", "xxxx"), ("b", "xxxx"), ("c", "xxxx")):  # 12 > 10: "a" goes
        store.get_or_compute(("f", key), lambda v=value: v)
    assert list(store.values) == [("f", "b"), ("f", "c")] and store.weight == 8
    store.get_or_compute(("f", "huge"), lambda: "x" * 50)  # over the limit alone: kept, alone
    assert list(store.values) == [("f", "huge")] and store.weight == 50


def test_loaded_models_are_cached_by_their_bytes_not_their_number():
    store = cache._models()
    assert store.max_weight == cache.MODEL_CACHE_BYTES and store.max_entries is None and store.weigh is cache.model_bytes
    names = ["encoder-parity-n6", "encoder-first-n6", "formal-parity-n4"]
    checkpoints = [cache.load(model_refs.resolve(name)[0]) for name in names]
    for ck in checkpoints:
        assert {p.dtype for p in ck.model.parameters()} == {torch.float32}
        assert cache.model_bytes(ck) == 4 * sum(p.numel() for p in ck.model.parameters()) + sum(
            b.numel() * b.element_size() for b in ck.model.buffers())
    count, held = cache.models_held()
    assert count >= 3 and held >= sum(cache.model_bytes(ck) for ck in checkpoints)
    assert held <= cache.MODEL_CACHE_BYTES


def test_memo_keys_are_the_bound_arguments():
    calls = []

    @memo.memo
    def double(x: int, scale: int = 2, progress=None) -> int:
        calls.append((x, scale))
        if progress:
            progress(1.0)
        return x * scale

    reported = []
    assert double(3) == double(3, 2) == double(x=3, scale=2, progress=reported.append) == 6
    assert calls == [(3, 2)] and reported == []  # one computation; the progress callback is not part of the key
    assert double(3, scale=5) == 15 and len(calls) == 2
    with pytest.raises(TypeError, match="must be hashable"):
        double([3])


def test_a_sweep_folder_is_read_once_for_its_tables_and_its_figures():
    folder = services.sweep_folder("quick/tradeoff")
    before = memo.stats().get("_read_results", 0)
    runs, _, _ = cache.experiment_results(folder)
    experiments.figures(folder)
    cache.experiment_results(folder)
    assert not runs.empty and memo.stats().get("_read_results", 0) - before <= 1  # one scheme, one key: read at most once


# ----------------------------------------------------------------------------- sweep folders


SHIPPED = ROOT / "experiments" / "results"


@pytest.mark.parametrize("typed", [
    "/etc", "/", "/tmp", "../../checkpoints", "quick/../../../pages", "/proc/self/cwd/pages", "/proc/self/root/etc",
    "~", "~/", "~root", "", "   ", "a" * 100_000, "quick/" + "b" * 300, "quick\x00/tradeoff", str(ROOT / "checkpoints"),
    "quick", "quick/no-such-sweep",
])
def test_a_sweep_folder_outside_the_results_folders_is_refused_in_one_line(typed, monkeypatch):
    monkeypatch.delenv("SENSVIZ_RESULTS_DIRS", raising=False)
    with pytest.raises(ValueError) as refused:
        services.sweep_folder(typed)
    message = str(refused.value)
    assert message == services.NOT_A_RESULTS_FOLDER and "\n" not in message
    assert str(ROOT) not in message and "/home" not in message and "/root" not in message


def test_a_sweep_folder_inside_a_results_folder_opens(monkeypatch, tmp_path):
    monkeypatch.setenv("SENSVIZ_RESULTS_DIRS", os.pathsep.join([str(SHIPPED), str(tmp_path)]))
    tradeoff = (SHIPPED / "quick" / "tradeoff").resolve()
    assert services.sweep_folder("quick/tradeoff") == tradeoff
    assert services.sweep_folder(str(SHIPPED / "quick" / "tradeoff")) == tradeoff  # absolute, inside
    assert services.sweep_folder("quick/../quick/tradeoff/") == tradeoff
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "runs.parquet").write_bytes(b"")
    assert services.sweep_folder("mine") == mine.resolve()  # the second root
    assert services.results_roots() == [SHIPPED, tmp_path]


def test_a_link_out_of_a_results_folder_is_refused(monkeypatch, tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "runs.parquet").write_bytes(b"")
    (root / "escape").symlink_to(outside)
    (root / "inside").symlink_to(SHIPPED / "quick" / "tradeoff")  # a link to a folder outside this root
    monkeypatch.setenv("SENSVIZ_RESULTS_DIRS", str(root))
    for typed in ("escape", str(root / "escape"), "inside"):
        with pytest.raises(ValueError, match="not a sweep folder under this server's results folders"):
            services.sweep_folder(typed)


def test_the_default_results_folders_are_the_shipped_results_and_the_data_directorys_sweeps(monkeypatch):
    monkeypatch.delenv("SENSVIZ_RESULTS_DIRS", raising=False)
    assert services.results_roots() == [SHIPPED, sv.files.data_dir() / "sweeps"]
    assert services.results_dir() == SHIPPED


# ----------------------------------------------------------------------------- the one page list


def test_the_readme_page_table_follows_the_page_list():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The explorer", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| \*\*(.+?)\*\* \(`(.*?)`\) \| (.+) \|$", section, flags=re.M)
    assert rows == [(p.title, "/" + p.url_path, p.shows) for p in nav.PAGES]


def test_a_class_link_that_names_localhost_is_given_at_the_servers_network_addresses():
    """An instructor who opened the app on the server as localhost got a class link no student's computer could
    open: such a link is recognised, and the same link is made at other addresses (port, path and query kept)."""
    from ui import url_state

    for link in ("http://localhost:8621/lab?class=AB12", "http://127.0.0.1:8501/lab", "https://[::1]/lab"):
        assert url_state.loopback(link), link
    for link in ("http://10.0.0.5:8501/lab", "https://lab.example.org/lab", "/lab?class=AB12"):
        assert not url_state.loopback(link), link
    assert url_state.loopback_host("::1") and url_state.loopback_host("127.0.0.1")  # server.address forms
    assert not url_state.loopback_host("0.0.0.0") and not url_state.loopback_host("")
    assert url_state.elsewhere("http://localhost:8621/lab?class=AB12", ["10.0.0.5", "192.168.1.9"]) == [
        "http://10.0.0.5:8621/lab?class=AB12", "http://192.168.1.9:8621/lab?class=AB12"]
