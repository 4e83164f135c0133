"""Classes (`server.classes`), their signing (`server.owners`) and the length-scaling assignment
(`server.assignments`): library only, no Streamlit, no training (a job manager's answers are
given as `JobStatus` values)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from conftest import in_processes
from helpers.core import HOSTILE as HOSTILE_TEXT

from sensviz import stats
from sensviz.limits import Limit
from server import assignments, classes, owners
from server.classes import ClassRefused, ClassStore, check_display_name
from server.jobs import JobStatus
from server.kept import KeptRefused, KeptStore
from server.limits import LIMITS

SECRET = b"k" * 32


@pytest.fixture
def store(tmp_path):
    return ClassStore(tmp_path / "classes", SECRET)


def test_owner_signing_moved_to_the_library(tmp_path):
    secret = owners.owner_secret(tmp_path)
    assert owners.owner_secret(tmp_path) == secret and (tmp_path / "owner_secret").stat().st_mode & 0o777 == 0o600
    minted = owners.mint_owner(secret)
    assert owners.verified_owner(minted, secret) == minted
    assert owners.verified_owner(owners.mint_owner(b"other"), secret) is None
    signed = owners.sign(secret, "instructor", "abc")
    assert owners.verify(secret, "instructor", "abc", signed)
    assert not owners.verify(secret, "rejoin", "abc", signed)  # one purpose's signature is not another's
    assert not owners.verify(secret, "instructor", "abd", signed)


def test_create_join_rejoin_and_survive_a_restart(store, tmp_path):
    made = store.create("Lab 3 — Tuesday", "teacher")
    private = store.instructor_code(made.code, "teacher")
    assert len(made.code) >= 16 and made.code not in private and private not in json.dumps(store.get(made.code).__dict__)
    member, rejoin = store.join(made.code, "  Ada   Lovelace ", "browser-1")
    assert member.name == "Ada Lovelace" and member.seat == 0
    with pytest.raises(ClassRefused, match="taken.*if it is yours.*rejoin code"):  # the way back for its owner
        store.join(made.code, "ada lovelace", "browser-2")  # unique ignoring case
    with pytest.raises(ClassRefused, match="already"):
        store.join(made.code, "Someone", "browser-1")
    again = ClassStore(tmp_path / "classes", SECRET)  # a restarted server
    assert again.rejoin(made.code, rejoin, "browser-3").id == member.id
    assert again.view(made.code, "browser-3").member_of("browser-3").name == "Ada Lovelace"
    with pytest.raises(ClassRefused):
        again.rejoin(made.code, "x" * 16, "browser-4")
    assert again.get(made.code).name == "Lab 3 — Tuesday"
    for k in range(4, 4 + 2 * classes.MEMBER_BROWSERS):  # a browser that keeps no cookies, reloaded again and again
        again.rejoin(made.code, rejoin, f"browser-{k}")
    owners = again.get(made.code).member(member.id).owners
    assert len(owners) == classes.MEMBER_BROWSERS and owners[0] == "browser-1"  # the joining one stays (its run)
    assert owners[-1] == f"browser-{3 + 2 * classes.MEMBER_BROWSERS}" and "browser-3" not in owners


def test_a_rejoin_code_is_read_as_a_person_types_it_and_older_codes_still_work(store):
    """A rejoin code is lower case without look-alike characters, in groups of four; typed in capitals, with spaces
    for the hyphens, or around it, it is the same code. A code made before (mixed case, signed as it is) still
    works; one character off is no code."""
    made = store.create("Lab", "teacher")
    ada, rejoin = store.join(made.code, "Ada", "browser-1")
    assert re.fullmatch(r"([a-z2-9]{4}-){3}[a-z2-9]{4}", rejoin) and not set(rejoin) & set("ilo01")
    for typed in (rejoin.upper(), f"  {rejoin.replace('-', ' ')} ", rejoin.replace("-", "")):
        assert store.rejoin(made.code, typed, f"browser-{typed}").id == ada.id, typed
    wrong = rejoin[:-1] + ("a" if rejoin[-1] != "a" else "b")
    with pytest.raises(ClassRefused, match="not a rejoin code"):
        store.rejoin(made.code, wrong, "browser-x")
    old = "Ab3_-xYz9QrStUvW"  # secrets.token_urlsafe(12), as codes were made before
    with store.lock:
        found = store._to_change(made.code)
        found.members[0]["rejoin"] = owners.sign(store.secret, "rejoin", old)
        store._save(found)
    assert store.rejoin(made.code, f" {old} ", "browser-old").id == ada.id
    with pytest.raises(ClassRefused):
        store.rejoin(made.code, old.lower(), "browser-older")  # a code made before is read as it was made


def test_members_joined_from_two_processes_at_once_are_all_kept(store):
    """Two web servers on one data folder join students at the same moment: no join overwrites another's."""
    made = store.create("Lab", "teacher")
    joins = 40
    in_processes(lambda i: [ClassStore(store.root, SECRET).join(made.code, f"s{i} {k}", f"browser-{i}-{k}")
                            for k in range(joins)])
    members = store.get(made.code).member_list()
    assert sorted(m.seat for m in members) == list(range(2 * joins)) and len({m.name for m in members}) == 2 * joins


def test_the_instructor_code_is_exchanged_once_checked(store):
    made = store.create("Lab", "teacher")
    assert store.get(made.code).is_instructor("teacher")  # the creator, with no code ever made
    with pytest.raises(ClassRefused, match="instructor"):
        store.instructor_code(made.code, "student")  # only an instructor makes one
    private = store.instructor_code(made.code, "teacher")
    assert not store.claim_instructor(made.code, "wrong-code-but-well-formed", "phone")
    assert not store.claim_instructor(made.code, made.code, "phone")  # the class code is not the instructor's
    assert store.claim_instructor(made.code, private, "phone")
    assert store.get(made.code).is_instructor("phone")
    assert not store.claim_instructor(made.code, private, "thief")  # exchanged once: then dead
    assert not store.get(made.code).is_instructor("thief")


def test_a_new_instructor_code_kills_the_old_and_instructors_revoke_each_other(store):
    made = store.create("Lab", "teacher")
    old = store.instructor_code(made.code, "teacher")
    new = store.instructor_code(made.code, None)  # the server's operator (`python -m server instructor-link`)
    assert not store.claim_instructor(made.code, old, "laptop") and store.claim_instructor(made.code, new, "laptop")
    with pytest.raises(ClassRefused, match="own"):
        store.revoke_instructor(made.code, "teacher", "teacher")
    store.revoke_instructor(made.code, "teacher", "laptop")
    assert store.get(made.code).instructors == ["teacher"]


def test_a_removed_member_cannot_join_again_until_let_back_and_rejoin_codes_renew(store):
    made = store.create("Lab", "teacher")
    ada, first = store.join(made.code, "Ada", "s1")
    second = store.new_rejoin_code(made.code, "s1")
    with pytest.raises(ClassRefused):
        store.rejoin(made.code, first, "s1-phone")  # the code before is dead
    assert store.rejoin(made.code, second, "s1-phone").id == ada.id
    store.remove(made.code, "teacher", ada.id)
    for browser in ("s1", "s1-phone"):
        with pytest.raises(ClassRefused, match="removed you"):
            store.join(made.code, "Another name", browser)
    store.readmit(made.code, "teacher")
    assert store.join(made.code, "Ada again", "s1")[0].name == "Ada again"


@pytest.mark.parametrize("name", HOSTILE_TEXT)
def test_hostile_display_names_are_refused_or_kept_as_text(store, name):
    made = store.create("Lab", "teacher")
    try:
        member, _ = store.join(made.code, name, "student")
    except (ValueError, ClassRefused) as err:
        assert "\n" not in str(err)
        return
    assert member.name == check_display_name(name) and len(member.name) <= 40


def test_display_name_rules():
    assert check_display_name("Zoë O'Neil-Smith") == "Zoë O'Neil-Smith"
    assert check_display_name("line\n\tbreak ") == "line break"  # whitespace runs become one space
    for bad in ("", "   ", "[x](http://e.vil)", "<b>x</b>", "a" * 41, ":red[x]", "a\x00b", None):
        with pytest.raises(ValueError):
            check_display_name(bad)


def test_instructor_renames_removes_closes_deletes(store):
    made = store.create("Lab", "teacher")
    a, _ = store.join(made.code, "Ada", "s1")
    b, _ = store.join(made.code, "Bob", "s2")
    with pytest.raises(ClassRefused, match="instructor"):
        store.rename(made.code, "s1", b.id, "Bobby")
    with pytest.raises(ClassRefused, match="taken"):
        store.rename(made.code, "teacher", b.id, "ADA")
    store.rename(made.code, "teacher", b.id, "Bobby")
    store.add_model(made.code, "s2", "tok-bob-aaaaaaaaaaaa", "parity", 8, 1.0, "run")
    store.remove(made.code, "teacher", b.id)
    c = store.get(made.code)
    assert [m.name for m in c.member_list()] == ["Ada"] and c.models == []
    store.close(made.code, "teacher")
    with pytest.raises(ClassRefused, match="closed"):
        store.join(made.code, "Cy", "s3")
    with pytest.raises(ClassRefused):
        store.delete(made.code, "s1")
    store.delete(made.code, "teacher")
    assert store.get(made.code) is None and store.view(made.code, "s1") is None


def test_isolation_between_classes_and_from_non_members(store):
    one = store.create("One", "t1")
    two = store.create("Two", "t2")
    store.join(one.code, "Ada", "s1")
    store.join(two.code, "Bob", "s2")
    store.add_model(one.code, "s1", "tok-one-aaaaaaaaaaaa", "parity", 8, 1.0, "run")
    assert store.view(one.code, "s2") is None and store.view(two.code, "s1") is None
    assert store.view(one.code, "stranger") is None
    assert [c.name for c in store.classes_of("s1")] == ["One"] and store.classes_of("stranger") == []
    with pytest.raises(ClassRefused):
        store.add_model(two.code, "s1", "tok-x-aaaaaaaaaaaaaa", "parity", 8, 1.0, "run")  # not a member there
    with pytest.raises(ClassRefused):
        store.rename(one.code, "t2", store.get(one.code).member_list()[0].id, "Eve")  # another class's instructor
    assert store.get("../../etc") is None and store.get("x") is None


def test_open_class_models_are_neither_evicted_nor_expired(tmp_path, store):
    made = store.create("Lab", "teacher")
    store.join(made.code, "Ada", "owner")
    clock = [1000.0]
    kept = KeptStore(tmp_path / "kept", cap=10_000, quota=2_000, ttl_s=100, clock=lambda: clock[0])
    kept.pins = store.pins
    first = kept.keep("trained", "a", b"a" * 700, "owner")
    store.add_model(made.code, "owner", first.token, "parity", 8, 1.0, "a")
    clock[0] += 3
    second = kept.keep("trained", "b", b"b" * 700, "owner")
    clock[0] += 3
    kept.keep("trained", "c", b"c" * 700, "owner")  # over the quota: evicts b, not the class's a
    assert kept.info(first.token) is not None and kept.info(second.token) is None
    clock[0] += 500  # past the TTL: a stays while the class is open
    assert kept.info(first.token) is not None
    with pytest.raises(KeptRefused):  # only pinned models left to evict: refused, nothing evicted
        kept.keep("trained", "d", b"d" * 1500, "owner")
    store.close(made.code, "teacher")
    clock[0] += 3
    assert kept.info(first.token) is None  # closed: it expires like any other


def test_a_class_pins_up_to_its_own_cap_and_nothing_once_idle(tmp_path):
    """Sybil members' class models: pinned only up to the class's cap (they count against their owners'
    quotas too), and a class nobody changed for the idle time pins nothing, so its models expire."""
    now = [1e6]
    classes = ClassStore(tmp_path / "classes", SECRET, clock=lambda: now[0], idle_s=10 * 86_400)
    made = classes.create("Lab", "teacher")
    kept = KeptStore(tmp_path / "kept", cap=100_000, quota=5_000, class_cap=2_500, ttl_s=86_400,
                     clock=lambda: now[0])
    kept.pins = classes.pins
    tokens = []
    for i in range(5):  # five sybil members, a model each (about 1,000 bytes with its metadata)
        classes.join(made.code, f"sybil {i}", f"s{i}")
        token = kept.keep("upload", f"m{i}", bytes([i]) * 700, f"s{i}").token
        classes.add_model(made.code, f"s{i}", token, "parity", 4, None, f"m{i}")
        tokens.append(token)
        now[0] += 1
    now[0] += 2 * 86_400  # past the TTL; the class is open and changed two days ago
    left = [t for t in tokens if kept.info(t) is not None]
    assert left == tokens[:2]  # the class's earliest, up to its 2,500 bytes; the others expired
    classes.vote(made.code, "s0", 1, "yes")  # a change keeps the class active
    now[0] += 9 * 86_400
    assert [t for t in tokens if kept.info(t) is not None] == tokens[:2]
    now[0] += 2 * 86_400  # idle for 11 days: it pins nothing
    assert all(kept.info(t) is None for t in tokens)


def test_a_member_adds_at_most_so_many_models_to_the_gallery(store, monkeypatch):
    monkeypatch.setitem(LIMITS, "class_models_per_member", Limit("class_models_per_member", 1, 2, "test"))
    made = store.create("Lab", "teacher")
    store.join(made.code, "Ada", "ada")
    store.join(made.code, "Bob", "bob")
    for i in range(2):
        store.add_model(made.code, "ada", f"token{i:012d}ada", "parity", 4, None, f"m{i}")
    with pytest.raises(ClassRefused, match=r"^2 of your models are in the class's gallery already \(limit"):
        store.add_model(made.code, "ada", "token000000002ada", "parity", 4, None, "m2")
    store.add_model(made.code, "bob", "token000000000bob", "parity", 4, None, "b")
    assert len(store.get(made.code).models) == 3


def test_a_full_gallery_makes_room_from_the_address_that_holds_most_of_it(store, monkeypatch):
    monkeypatch.setitem(LIMITS, "class_models", Limit("class_models", 1, 6, "test"))
    made = store.create("Lab", "teacher")
    for k in range(3):  # cookie-less sybils from one address fill the gallery
        store.join(made.code, f"sybil {k}", f"s{k}", "10.6.6.6")
        for i in range(2):
            store.add_model(made.code, f"s{k}", f"sybil{k}token{i:06d}", "parity", 4, None, "m")
    store.join(made.code, "Ada", "ada", "10.0.0.1")
    for i in range(3):  # the honest student's models push out the flood's oldest
        store.add_model(made.code, "ada", f"adatoken{i:010d}", "parity", 4, None, "mine")
    tokens = [m.token for m in store.get(made.code).model_list()]
    assert len(tokens) == 6 and tokens[:3] == ["sybil1token000001", "sybil2token000000", "sybil2token000001"]
    with pytest.raises(ClassRefused, match="^the class's gallery is full .* no network address holds more of it"):
        store.add_model(made.code, "ada", "adatoken0000000003", "parity", 4, None, "mine")  # 3 each: nobody holds more


def test_the_deal_covers_the_grid_before_repeating():
    a = assignments.LENGTH_SCALING
    cells = a.cells()
    assert len(cells) == 30
    first_six = {(c["task"], c["n"]) for c in cells[:4]}
    assert first_six == {(t, n) for t in a.tasks for n in a.lengths}
    assert len({(c["task"], c["n"], c["seed"]) for c in cells}) == 30
    assert a.deal(30) != a.deal(0) and (a.deal(30)["task"], a.deal(30)["n"]) == (cells[0]["task"], cells[0]["n"])


@pytest.mark.parametrize("members", [0, 1, 2, 7, 12, 30, 45])
def test_the_instructors_sentence_on_dealing_says_what_the_deal_does(members):
    """`dealing`'s runs per member, against the deal itself (`deal_open`): every member starts the run they are dealt,
    then they finish in turn, each taking the cell dealt to them then, until the grid is done."""
    a = assignments.LENGTH_SCALING
    said = assignments.dealing(a, members)
    assert said.startswith(f"The assignment is {len(a.cells())} runs (PARITY and FIRST at n = 4 and 8)")
    if members == 0:
        assert said.endswith("nobody has joined yet.")
        return
    seats, done, held = {f"m{i}": i for i in range(members)}, [], {}
    for member in seats:  # everyone starts a run
        held[member] = a.deal_open(seats, done, held)[member]
    grid = a.cells()
    if members >= len(grid):  # one run each: the grid once, then the grid again with new seeds
        assert sorted(map(str, list(held.values())[:len(grid)])) == sorted(map(str, grid))
        assert len({str(c) for c in held.values()}) == members and "one run each covers them" in said
        return
    trained, turn = dict.fromkeys(seats, 0), 0
    while any(c not in done for c in grid):
        member = f"m{turn % members}"
        done.append(held.pop(member))
        trained[member] += 1
        held[member] = a.deal_open(seats, done, held)[member]
        turn += 1
    assert len(done) == len(grid)  # nothing trained twice
    counts = sorted(set(trained.values()))
    if members == 1:
        assert counts == [30] and "the one member trains all of them" in said
    else:
        assert f"each trains about {' or '.join(map(str, counts))} of them " in said, (counts, said)


@pytest.mark.parametrize("tables", [assignments.TABLES, assignments.TABLES[:1]], ids=["both tables", "standard"])
def test_the_plan_fits_5_minutes_with_80_percent_power_at_half_the_effect(tables):
    found = assignments.plan(folders=tables)  # the decide table grows while its sweep runs: the rule, not the digits
    assert found["runs"] == 30
    assert found["seconds"] <= found["limit_s"] == 300
    assert found["power"] >= 0.8
    if tables == assignments.TABLES:  # the plan as shipped (the standard table alone: its effect, 0.50 at half)
        assert found["power_half"] >= 0.8


def _runs(a, parity_slope: float, count: dict | None = None, noise: float = 0.002) -> pd.DataFrame:
    rows = []
    for i, cell in enumerate(a.cells()):
        if count is not None and count.get((cell["task"], cell["n"]), 0) <= 0:
            continue
        if count is not None:
            count[(cell["task"], cell["n"])] -= 1
        slope = parity_slope if cell["task"] == "parity" else 0.0
        value = 0.01 + slope * cell["n"] + noise * ((i * 7919) % 11 - 5) / 5
        rows.append({**a.run_settings(cell), "status": "finished", "converged": True, a.quantity: value})
    return pd.DataFrame(rows)


def test_the_class_verdict_uses_the_fidelity_rule():
    a = assignments.LENGTH_SCALING
    done = assignments.verdict(a, _runs(a, 0.01))
    assert done.verdict == stats.REPRODUCED and done.text == "the class reproduced the paper's claim"
    assert done.interval.low > 0
    partial = assignments.verdict(a, _runs(a, 0.01, {("parity", 4): 5, ("parity", 8): 11, ("first", 4): 4,
                                                       ("first", 8): 4}))
    assert partial.text == "not yet resolved: 6 more runs at n = 4" and partial.verdict == stats.UNRESOLVED
    flat = assignments.verdict(a, _runs(a, 0.0, noise=0.01))
    assert flat.verdict == stats.UNRESOLVED and flat.text.startswith("not yet resolved")
    empty = assignments.verdict(a, pd.DataFrame())
    assert empty.text == "not yet resolved: 30 more runs at n = 4 and 8" and empty.interval is None
    assert empty.reason == "30 more runs at n = 4 and 8"  # what the projector says under "Verdict: not resolved yet"


class _Manager:
    """The job manager's answers for the class's jobs (its interface: status, records, stop)."""

    def __init__(self):
        self.statuses: dict[str, JobStatus] = {}
        self.stopped: list[tuple[str, str]] = []
        self.lost: set[str] = set()  # jobs whose settings were not kept

    def status(self, job_id):
        return self.statuses.get(job_id)

    def records(self, job_id):
        return [{"step": 0, "sharpness": 0.02, "accuracy": 0.5, "loss": 0.25},
                {"step": 1200, "sharpness": 0.05, "accuracy": 1.0, "loss": 1e-5}]

    def stop(self, job_id, owner):
        self.stopped.append((job_id, owner))
        return True

    def request(self, job_id):
        return None if job_id in self.lost else {"settings": "kept"}


def test_sync_fills_the_gallery_and_the_sweep_folder(store):
    from sensviz.sweeps import read_results

    made = store.create("Lab", "teacher")
    store.join(made.code, "Ada", "s1")
    store.start_assignment(made.code, "teacher", "length_scaling")
    cell = assignments.LENGTH_SCALING.deal(0)
    store.add_job(made.code, "s1", "job-aaaaaaaaaaaa", cell["task"], cell["n"], cell)
    manager = _Manager()
    manager.statuses["job-aaaaaaaaaaaa"] = JobStatus("job-aaaaaaaaaaaa", "s1", "parity-n4", "running", 0.0)
    assert store.sync(made.code, manager) == 0
    assert store.job_rows(made.code, manager)[0]["state"] == "running"
    with pytest.raises(ClassRefused):
        store.stop(made.code, "s1", "job-aaaaaaaaaaaa", manager)
    assert store.stop(made.code, "teacher", "job-aaaaaaaaaaaa", manager) and manager.stopped == [("job-aaaaaaaaaaaa", "s1")]
    manager.statuses["job-aaaaaaaaaaaa"] = JobStatus("job-aaaaaaaaaaaa", "s1", "parity-n4", "finished", 0.0,
                                                     kept="tok-aaaaaaaaaaaaaaaa", steps=1200, seconds=20.0)
    assert store.sync(made.code, manager) == 1 and store.sync(made.code, manager) == 0
    model = store.get(made.code).model_list()[0]
    assert (model.token, model.task, model.n, model.accuracy) == ("tok-aaaaaaaaaaaaaaaa", "parity", 4, 1.0)
    runs, history, spec = read_results(store.sweep_folder(made.code))
    assert runs.loc[0, "sharpness"] == 0.05 and bool(runs.loc[0, "converged"]) and runs.loc[0, "seed"] == cell["seed"]
    assert runs.loc[0, "steps_trained"] == 1200 and runs.loc[0, "loss"] == 1e-5
    assert len(history) == 2 and spec["experiment"] == "length_scaling"


def test_a_stopped_run_is_not_finished_and_a_rerun_replaces_no_row(store):
    """A stopped run is recorded as failed; each job is its own row; the verdict counts a cell's latest finished run once."""
    from sensviz.sweeps import read_results

    made = store.create("Lab", "teacher")
    store.join(made.code, "Ada", "s1")
    store.start_assignment(made.code, "teacher", "length_scaling")
    cell = assignments.LENGTH_SCALING.deal(0)
    manager = _Manager()
    for job_id, state in (("job-aaaaaaaaaaaa", "finished"), ("job-bbbbbbbbbbbb", "stopped"),
                          ("job-cccccccccccc", "finished")):
        store.add_job(made.code, "s1", job_id, cell["task"], cell["n"], cell)
        manager.statuses[job_id] = JobStatus(job_id, "s1", "parity-n4", state, 0.0, steps=1200, seconds=20.0)
        assert store.sync(made.code, manager) == 1
    runs, _, _ = read_results(store.sweep_folder(made.code))
    assert len(runs) == 3 and runs["run_id"].nunique() == 3
    assert sorted(runs["status"]) == ["failed", "finished", "finished"]
    assert "stopped" in runs.loc[runs["status"] == "failed", "error"].iloc[0]
    assert "member" not in assignments.record(assignments.LENGTH_SCALING, cell, [{"step": 1, "loss": 0.1, "member": 0}],
                                              "finished", None, 1, 1.0)["metrics"]
    counted = assignments.counted(runs)
    assert len(counted) == 1 and counted["ended_at"].iloc[0] == runs["ended_at"].max()
    missing = assignments.missing_runs(assignments.LENGTH_SCALING, runs)
    assert missing[(cell["task"], cell["n"])] == assignments.LENGTH_SCALING.seeds[cell["task"]] - 1


def test_the_fidelity_page_refuses_a_class_table_in_one_line(store, tmp_path, capsys):
    from sensviz import cli, sweeps

    made = store.create("Lab", "teacher")
    store.start_assignment(made.code, "teacher", "length_scaling")
    a = assignments.LENGTH_SCALING
    for i, cell in enumerate(a.cells()[:4]):
        store._write_run(made.code, f"job-{i}", a, {"settings": a.run_settings(cell), "status": "finished", "error": None,
                                                   "metrics": {"sharpness": 0.01 * cell["n"], "converged": True},
                                                   "history": [], "wall_s": 1.0})
    sweeps.write_tables(store.sweep_folder(made.code))
    folder = store.sweep_folder(made.code).parents[1]
    assert cli.main(["fidelity", str(folder), "--scale", "class", "--out", str(tmp_path / "page.md")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lack the column 'sharpness_proxy_pm1'" in err and "Traceback" not in err
    assert not (tmp_path / "page.md").exists()


@pytest.mark.parametrize("lookalike", ["\u0410lice", "\u0391lice", "\u1d00lice", "A1ice", "ALICE", "Alice\u3164", "Al\u200bice"])
def test_a_name_that_looks_like_a_members_or_hides_a_character_is_refused(store, lookalike):
    made = store.create("Lab", "teacher")
    store.join(made.code, "Alice", "s1")
    with pytest.raises((ClassRefused, ValueError)) as refused:
        store.join(made.code, lookalike, "s2")
    assert "\n" not in str(refused.value) and ("looks like" in str(refused.value) or "invisible" in str(refused.value))
    bob, _ = store.join(made.code, "Bob", "s3")
    with pytest.raises((ClassRefused, ValueError), match="looks like|invisible"):  # a rename is checked the same way
        store.rename(made.code, "teacher", bob.id, lookalike)
    assert [m.name for m in store.get(made.code).member_list()] == ["Alice", "Bob"]


@pytest.mark.parametrize("name", ["\u3164", "\u115f\u1160", "\u200b", "\u202eecilA"])
def test_a_name_made_of_invisible_characters_is_refused(store, name):
    made = store.create("Lab", "teacher")
    with pytest.raises(ValueError, match="invisible"):
        store.join(made.code, name, "s1")
    with pytest.raises(ValueError, match="invisible"):
        store.create(f"Lab {name}", "teacher")


def test_class_names_are_unique_on_the_server_by_how_they_look(store):
    store.create("Physics 101", "teacher")
    with pytest.raises(ClassRefused, match="looks like"):
        store.create("Phy\u0455ics 101", "another teacher")  # a Cyrillic dze for the s
    assert store.create("Physics 102", "another teacher").name == "Physics 102"  # the check can pass


def _finish(store, manager, code, member_owner, job_id, cell, state="finished"):
    """A member trains their cell: the job is added, runs, ends in `state` and is collected."""
    store.add_job(code, member_owner, job_id, cell["task"], cell["n"], cell)
    manager.statuses[job_id] = JobStatus(job_id, member_owner, "run", state, 0.0, steps=1200, seconds=20.0)
    store.record_ended(job_id, manager)


def test_a_class_of_twelve_completes_the_thirty_run_design(store):
    """Each member who finishes takes the next unclaimed run: 12 members, 30 cells, three rounds."""
    made = store.create("Lab", "teacher")
    students = [f"s{k}" for k in range(12)]
    ids = {s: store.join(made.code, f"student {k}", s)[0].id for k, s in enumerate(students)}
    store.start_assignment(made.code, "teacher", "length_scaling")
    manager, a, jobs = _Manager(), assignments.LENGTH_SCALING, 0
    while assignments.missing_runs(a, _class_table(store, made.code)):
        dealt = store.deal(made.code, manager)
        assert len({(c["task"], c["n"], c["seed"]) for c in dealt.values()}) == len(students)  # nobody shares a cell
        for s in students:
            jobs += 1
            _finish(store, manager, made.code, s, f"job-{jobs:012d}", dealt[ids[s]])
        assert jobs <= 36, "the design never completed"
    runs = _class_table(store, made.code)
    assert set(zip(runs["task"], runs["n"], runs["seed"])) >= {(c["task"], c["n"], c["seed"]) for c in a.cells()}
    assert assignments.missing_runs(a, runs) == {} and jobs == 36  # three rounds of 12: the 30 cells and 6 new seeds
    assert set(runs["member_name"]) == {f"student {k}" for k in range(12)}  # each row names its member


def _class_table(store, code) -> pd.DataFrame:
    from sensviz.sweeps import read_results

    try:
        return read_results(store.sweep_folder(code))[0]
    except ValueError:
        return pd.DataFrame()


def _assigned(store, *names):
    """A class "Lab" whose members `names` joined from the browsers s1, s2, ... and whose teacher started the
    length-scaling assignment: the class and its members."""
    made = store.create("Lab", "teacher")
    members = [store.join(made.code, name, f"s{k}")[0] for k, name in enumerate(names, start=1)]
    store.start_assignment(made.code, "teacher", "length_scaling")
    return made, members


def test_a_removed_members_running_cell_is_dealt_again_and_their_run_counts_for_nothing(store):
    made, (ada, bob) = _assigned(store, "Ada", "Bob")
    manager = _Manager()
    first = store.deal(made.code, manager)
    store.add_job(made.code, "s1", "job-aaaaaaaaaaaa", first[ada.id]["task"], first[ada.id]["n"], first[ada.id])
    manager.statuses["job-aaaaaaaaaaaa"] = JobStatus("job-aaaaaaaaaaaa", "s1", "run", "running", 0.0)
    assert store.deal(made.code, manager)[ada.id] == first[ada.id]  # a running member keeps their cell
    store.remove(made.code, "teacher", ada.id)
    assert store.deal(made.code, manager)[bob.id] == first[bob.id]  # Bob keeps the run he was told to train
    manager.statuses["job-aaaaaaaaaaaa"] = JobStatus("job-aaaaaaaaaaaa", "s1", "run", "finished", 0.0, steps=1200)
    store.record_ended("job-aaaaaaaaaaaa", manager)
    assert _class_table(store, made.code).empty  # it ended after the removal: no row, no verdict
    _finish(store, manager, made.code, "s2", "job-bbbbbbbbbbbb", first[bob.id])
    assert store.deal(made.code, manager)[bob.id] == first[ada.id]  # the removed member's cell goes to the next who asks


def test_removing_a_member_stops_their_class_run_that_trains(store):
    made, (ana, ben) = _assigned(store, "Ana", "Ben")
    manager = _Manager()
    cell = store.deal(made.code, manager)[ben.id]
    store.add_job(made.code, "s2", "job-bbbbbbbbbbbb", cell["task"], cell["n"], cell)
    manager.statuses["job-bbbbbbbbbbbb"] = JobStatus("job-bbbbbbbbbbbb", "s2", "run", "running", 0.0)
    store.remove(made.code, "teacher", ben.id, manager)
    assert manager.stopped == [("job-bbbbbbbbbbbb", "s2")]
    row = store.job_rows(made.code, manager)[0]
    assert row["member"] == "(removed)" and row["member_id"] == ben.id


def test_a_removed_members_finished_run_stays_done_and_is_not_dealt_again(store):
    """Ben finished his cell, then the instructor removed him: his row stays in the class's table, so the cell is
    done; Ana, who finishes hers next, is dealt a cell nobody has (not Ben's again)."""
    made, (ana, ben) = _assigned(store, "Ana", "Ben")
    manager = _Manager()
    first = store.deal(made.code, manager)
    _finish(store, manager, made.code, "s2", "job-bbbbbbbbbbbb", first[ben.id])
    store.remove(made.code, "teacher", ben.id)
    assert len(_class_table(store, made.code)) == 1  # his run is the class's
    _finish(store, manager, made.code, "s1", "job-aaaaaaaaaaaa", first[ana.id])
    assert store.deal(made.code, manager)[ana.id] not in (first[ana.id], first[ben.id])


def test_the_next_run_a_member_was_told_does_not_change_when_someone_joins_later(store):
    """Ana finished and was told her next run (a spare: the cell of the next seat); Cleo joins after, in that seat.
    Ana's next run stays hers; Cleo is dealt another (before, Cleo took it and Ana's form filled itself anew)."""
    made, (ana, ben) = _assigned(store, "Ana", "Ben")
    manager = _Manager()
    first = store.deal(made.code, manager)
    _finish(store, manager, made.code, "s1", "job-aaaaaaaaaaaa", first[ana.id])
    told = store.deal(made.code, manager)[ana.id]
    assert told == assignments.LENGTH_SCALING.deal(2)  # the cell of the seat a third member would take
    cleo, _ = store.join(made.code, "Cleo", "s3")
    dealt = store.deal(made.code, manager)
    assert dealt[ana.id] == told and dealt[cleo.id] not in (told, first[ana.id], dealt[ben.id])
    assert store.get(made.code).offered == {ana.id: told, cleo.id: dealt[cleo.id]}  # Cleo's is a spare too
    store.add_job(made.code, "s1", "job-aaaaaaaaaaa2", told["task"], told["n"], told)  # she trains it
    manager.statuses["job-aaaaaaaaaaa2"] = JobStatus("job-aaaaaaaaaaa2", "s1", "run", "running", 0.0)
    assert store.deal(made.code, manager)[ana.id] == told and ana.id not in store.get(made.code).offered


def test_one_cell_stopped_by_a_restart_for_two_members_is_held_for_one(store):
    """Two members' runs of one cell (dealt again before a restart stopped both) wait to be continued: the cell is held
    for the first to have joined; the other is dealt another cell and told to train it."""
    from server import jobs

    made, (ana, bo) = _assigned(store, "Ana", "Bo")
    manager = _Manager()
    cell = store.deal(made.code, manager)[ana.id]
    for owner, job_id in (("s1", "job-aaaaaaaaaaaa"), ("s2", "job-bbbbbbbbbbbb")):
        store.add_job(made.code, owner, job_id, cell["task"], cell["n"], cell)
        manager.statuses[job_id] = JobStatus(job_id, owner, "run", "stopped", 0.0, resume_step=500,
                                             reason=f"{jobs.STOPPED_BY_RESTART} at step 500")
        store.record_ended(job_id, manager)
    dealt = store.deal(made.code, manager)
    assert dealt[ana.id] == cell and dealt[bo.id] != cell
    assert store.waiting_to_continue(made.code, ana.id, manager) == "job-aaaaaaaaaaaa"
    assert store.waiting_to_continue(made.code, bo.id, manager) is None
    assert [n.kind for n in store.notices(made.code, "s2", manager)] == ["assignment"]


def test_a_run_a_restart_stopped_keeps_its_cell_for_its_member_until_continued(store):
    """A restart stopped Bo's second run (not his seat's cell): its cell is not dealt to anyone (him included) as a
    new run from step 0; he is told to continue it, with the run to continue; once continued, the continuation holds
    the cell as any run does. A run whose settings were not kept cannot be continued: its cell is dealt on."""
    from server import jobs

    made, (ana, bo) = _assigned(store, "Ana", "Bo")
    manager = _Manager()
    first = store.deal(made.code, manager)
    _finish(store, manager, made.code, "s2", "job-bbbbbbbbbbb0", first[bo.id])
    cell = store.deal(made.code, manager)[bo.id]  # his second: no seat of anyone's
    assert cell not in (first[bo.id], first[ana.id])
    store.add_job(made.code, "s2", "job-bbbbbbbbbbbb", cell["task"], cell["n"], cell)
    manager.statuses["job-bbbbbbbbbbbb"] = JobStatus("job-bbbbbbbbbbbb", "s2", "run", "stopped", 0.0, resume_step=500,
                                                     reason=f"{jobs.STOPPED_BY_RESTART} at step 500")
    store.record_ended("job-bbbbbbbbbbbb", manager)
    _finish(store, manager, made.code, "s1", "job-aaaaaaaaaaaa", first[ana.id])
    dealt = store.deal(made.code, manager)
    assert dealt[bo.id] == cell and dealt[ana.id] != cell  # his, and nobody else's (Ana was dealt it before the fix)
    told = store.notices(made.code, "s2", manager)
    assert [(n.kind, n.job) for n in told] == [("continue", "job-bbbbbbbbbbbb")]
    assert "from step 500, exactly as it would have gone on" in told[0].text
    assert store.waiting_to_continue(made.code, bo.id, manager) == "job-bbbbbbbbbbbb"
    manager.statuses["job-bbbbbbbbbbbb"].rerun = "job-cccccccccccc"  # continued: the member's next run
    store.add_job(made.code, "s2", "job-cccccccccccc", cell["task"], cell["n"], cell)
    manager.statuses["job-cccccccccccc"] = JobStatus("job-cccccccccccc", "s2", "run", "running", 0.0)
    assert store.deal(made.code, manager)[bo.id] == cell and store.notices(made.code, "s2", manager) == []
    manager.statuses["job-cccccccccccc"].state = "finished"
    store.record_ended("job-cccccccccccc", manager)
    assert store.deal(made.code, manager)[bo.id] != cell  # done: his next is another
    nxt = store.deal(made.code, manager)[bo.id]  # a restart again, and this time its settings are lost
    store.add_job(made.code, "s2", "job-dddddddddddd", nxt["task"], nxt["n"], nxt)
    manager.lost.add("job-dddddddddddd")
    manager.statuses["job-dddddddddddd"] = JobStatus("job-dddddddddddd", "s2", "run", "stopped", 0.0,
                                                     reason=f"{jobs.STOPPED_BY_RESTART} at step 100")
    store.record_ended("job-dddddddddddd", manager)
    assert store.waiting_to_continue(made.code, bo.id, manager) is None
    assert [n.kind for n in store.notices(made.code, "s2", manager)] == ["assignment"]  # the Train form's way

def test_a_run_is_recorded_when_its_job_ends_not_when_a_page_looks(store):
    made, (ada,) = _assigned(store, "Ada")
    manager = _Manager()
    _finish(store, manager, made.code, "s1", "job-aaaaaaaaaaaa", store.deal(made.code, manager)[ada.id])
    runs = _class_table(store, made.code)
    assert list(runs["member"]) == [ada.id] and list(runs["member_name"]) == ["Ada"]
    store.record_ended("job-unknownjob00", manager)  # another server's, or no class's: nothing happens
    assert len(_class_table(store, made.code)) == 1


def test_the_operators_command_issues_a_new_instructor_link(tmp_path, monkeypatch, capsys):
    from urllib.parse import parse_qs, urlsplit

    from server.__main__ import main

    monkeypatch.setenv("SENSVIZ_DATA_DIR", str(tmp_path))
    store = ClassStore(tmp_path / "classes", owners.owner_secret(tmp_path))
    made = store.create("Physics 101", "lost teacher")
    assert main(["instructor-link", "Physics 101", "--base", "https://lab.example.org/"]) == 0
    link = capsys.readouterr().out.strip()
    query = parse_qs(urlsplit(link).query)
    assert link.startswith("https://lab.example.org/class?") and query["class"] == [made.code]
    assert store.claim_instructor(made.code, query["instructor"][0], "new browser")
    assert main(["instructor-link", "No such class"]) == 2 and "no class" in capsys.readouterr().err


def test_an_ended_assignment_is_decided_on_the_runs_in_with_the_power_fixed_in_advance(store):
    a = assignments.LENGTH_SCALING
    few = _runs(a, 0.01, {("parity", 4): 3, ("parity", 8): 3, ("first", 4): 2, ("first", 8): 1})
    short = assignments.verdict(a, few, ended=True)
    assert short.verdict == stats.UNRESOLVED and short.text == "not resolved: fewer than 2 converged runs of first at n = 8"
    assert assignments.verdict(a, few).text.startswith("not yet resolved: ")  # not ended: runs still to come
    enough = _runs(a, 0.01, {("parity", 4): 3, ("parity", 8): 3, ("first", 4): 2, ("first", 8): 2})
    ended = assignments.verdict(a, enough, ended=True)
    counts = {(t, n): len(enough[(enough["task"] == t) & (enough["n"] == n)]) for t in a.tasks for n in a.lengths}
    power = assignments.design_power(a, counts)
    assert ended.verdict == stats.REPRODUCED and f"the design had {power:.0%} power at the effect fixed in advance" in ended.text
    flat = assignments.verdict(a, _runs(a, 0.0, {("parity", 4): 3, ("parity", 8): 3, ("first", 4): 2, ("first", 8): 2}),
                               ended=True)
    assert f"{power:.0%} power" in flat.text  # the same design, the same power: never computed from the runs' effect
    assert 0 < power < assignments.plan(a)["power"]  # fewer runs than planned: less power than the plan's
    made = store.create("Lab", "teacher")
    store.join(made.code, "Ada", "s1")
    store.start_assignment(made.code, "teacher", "length_scaling")
    store.end_assignment(made.code, "teacher")
    assert store.get(made.code).ended and store.deal(made.code, _Manager()) == {}  # nobody is dealt another run


def test_a_change_never_changes_a_class_another_thread_is_reading(store):
    """`get` hands out one object per class to every reader; a change works on a copy (a thread iterating over
    the class's jobs while the job manager's thread recorded one failed with 'dictionary changed size')."""
    made = store.create("Lab", "teacher")
    reading = store.get(made.code)
    store.join(made.code, "Ada", "s1")
    store.add_job(made.code, "s1", "job-aaaaaaaaaaaa", "parity", 4, None)
    assert reading.members == [] and reading.jobs == {}
    assert [m.name for m in store.get(made.code).member_list()] == ["Ada"]


def test_one_address_creates_and_joins_only_so_much(store, monkeypatch):
    """An owner id costs nothing (a browser without a cookie is a new one); a network address does."""
    clock = [1000.0]
    store.clock = lambda: clock[0]
    per_hour = int(LIMITS["classes_per_address_hour"].high)
    for k in range(per_hour):
        store.create(f"Lab {k}", f"sybil {k}", "10.0.0.7")
    with pytest.raises(ClassRefused, match="classes_per_address_hour"):
        store.create("Lab more", "another sybil", "10.0.0.7")
    assert store.create("Honest lab", "teacher", "10.0.0.8").name == "Honest lab"  # another address is not held up
    clock[0] += 3601
    assert store.create("Lab later", "sybil", "10.0.0.7").name == "Lab later"  # an hour later
    made = store.create("Big lab", "teacher", "10.0.0.9")
    monkeypatch.setitem(LIMITS, "class_members_per_address", Limit("class_members_per_address", 1, 3, "test"))
    for k in range(3):
        store.join(made.code, f"student {k}", f"browser {k}", "192.0.2.1")
        clock[0] += 61  # one a minute: under the rate
    with pytest.raises(ClassRefused, match="class_members_per_address"):
        store.join(made.code, "a fourth", "browser 4", "192.0.2.1")
    assert store.join(made.code, "from home", "browser 5", "192.0.2.2")[0].name == "from home"
    address_file = (store.root / made.code / "class.json").read_text()
    assert "192.0.2" not in address_file  # the files name no one's address


def test_a_class_behind_one_nat_joins_at_once_within_the_rate(store):
    made = store.create("Lab", "teacher", "10.0.0.1")
    at_once = int(LIMITS["class_joins_per_address_minute"].high)
    for k in range(at_once):
        store.join(made.code, f"student {k}", f"browser {k}", "198.51.100.1")
    with pytest.raises(ClassRefused, match="class_joins_per_address_minute"):
        store.join(made.code, "one too many", "browser x", "198.51.100.1")
    assert at_once >= 60  # a class of 60 behind one NAT joins in one minute


def test_the_assignments_seeds_are_no_sweep_scales():
    """A class's runs never reuse a seed of a shipped or running sweep scale (the confirm scale starts at 1000)."""
    from pathlib import Path

    from sensviz import sweeps

    root = Path(__file__).resolve().parents[2] / "experiments"
    scales = {None, "standard", "paper", "decide", "confirm", "quick"}
    used = set()
    for path in root.glob("*.toml"):
        for scale in scales:
            try:
                used |= {r["seed"] for r in sweeps.load_spec(path, scale).runs}
            except (ValueError, KeyError):  # the spec has no such scale
                continue
    a = assignments.LENGTH_SCALING
    dealt = {a.deal(seat)["seed"] for seat in range(10 * len(a.cells()))}  # ten rounds: a class of 300
    assert len(used) > 100 and not dealt & used


def test_the_class_tally_counts_the_members_latest_predictions_and_names_nobody(store):
    made = store.create("Lab", "teacher")
    ada, _ = store.join(made.code, "Ada", "s1")
    store.join(made.code, "Bob", "s2")
    store.vote(made.code, "s1", 1, "yes")
    store.vote(made.code, "s1", 1, "no")  # changed before the reveal: the latest counts
    store.vote(made.code, "s2", 1, "no")
    store.vote(made.code, "s2", 3, "skip")
    assert store.tally(made.code) == {1: {"no": 2}, 3: {"skip": 1}}
    with pytest.raises(ClassRefused, match="members"):
        store.vote(made.code, "stranger", 1, "yes")
    with pytest.raises(ClassRefused, match="prediction"):
        store.vote(made.code, "s1", 0, "yes")
    store.remove(made.code, "teacher", ada.id)
    assert store.tally(made.code) == {1: {"no": 1}, 3: {"skip": 1}}  # a removed member's vote no longer counts
    with pytest.raises(ClassRefused, match="instructor"):
        store.hold(made.code, "s2", 1)
    store.hold(made.code, "teacher", 1)
    assert store.get(made.code).held == [1] and store.get(made.code).released == []
    store.hold(made.code, "teacher", 1, held=False)
    assert store.get(made.code).held == [] and store.get(made.code).released == [1]


def test_the_run_a_member_was_told_to_train_stays_theirs_while_others_finish(store):
    """Bob reads his cell in the Lab; Ada finishes hers first, then a restart stops Bob's run: Bob's cell stays his
    (the old deal gave it to Ada, who had finished, and Bob another), and Ada is dealt one nobody else was."""
    made, (ada, bob) = _assigned(store, "Ada", "Bob")
    manager = _Manager()
    told = store.deal(made.code, manager)
    _finish(store, manager, made.code, "s1", "job-aaaaaaaaaaaa", told[ada.id])
    after = store.deal(made.code, manager)
    assert after[bob.id] == told[bob.id] and after[ada.id] not in (told[ada.id], told[bob.id])
    _finish(store, manager, made.code, "s2", "job-bbbbbbbbbbbb", told[bob.id], state="stopped")  # a restart stopped it
    again = store.deal(made.code, manager)
    assert again[bob.id] == told[bob.id] and again[ada.id] == after[ada.id]


def test_a_run_continued_after_a_restart_reads_continued_and_its_model_leaves_the_gallery(store):
    """The instructor's table says a run a restart stopped was continued (not only "stopped"), and when the
    continuation ends with its model, the stopped part's model leaves the class's gallery (one run, one model)."""
    made, (ada,) = _assigned(store, "Ada")
    manager, cell = _Manager(), store.deal(made.code, _Manager())[ada.id]
    store.add_job(made.code, "s1", "job-stoppedrun00", cell["task"], cell["n"], cell)
    manager.statuses["job-stoppedrun00"] = JobStatus("job-stoppedrun00", "s1", "run", "stopped", 0.0, kept="tok-stopped")
    store.record_ended("job-stoppedrun00", manager)
    assert [m["job"] for m in store.get(made.code).models] == ["job-stoppedrun00"]
    manager.statuses["job-stoppedrun00"].rerun = "job-continued000"
    store.add_job(made.code, "s1", "job-continued000", cell["task"], cell["n"], cell)
    manager.statuses["job-continued000"] = JobStatus("job-continued000", "s1", "run", "finished", 0.0, kept="tok-done",
                                                     steps=1200)
    store.record_ended("job-continued000", manager)
    assert [m["job"] for m in store.get(made.code).models] == ["job-continued000"]
    assert [r["state"] for r in store.job_rows(made.code, manager)] == ["continued", "finished"]
