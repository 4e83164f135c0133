"""Classes: a room for a lab's students, kept on the server's disk (no Streamlit here).

A class lives in `<data dir>/classes/<code>/class.json` (`ClassStore`), written whole and atomically
(`sensviz.files.write_atomic`) under one lock that holds across processes (`FolderLock`: several web
servers on one data folder), so it survives restarts, a crash never leaves half a file, and no
server's change overwrites another's. Its code is random (`secrets.token_urlsafe`): whoever has the
class link (`/lab?class=<code>`) may join, nobody can list classes. The instructor gets a second,
private one-time code, minted only when asked for (`instructor_code`: by an instructor, for another
browser or a co-instructor, or by the server's operator, `python -m server instructor-link`); the
store keeps only its signature (`server.owners.sign`, the server's secret), and whoever opens the
instructor link first becomes an instructor of the class by their signed owner id, after which the
code is dead (the app also drops it from the URL). Members join with a display name (`check_display_name`: the
`display_name_chars` limit, letters, digits, spaces and `-_.'` only, nothing invisible, unique in the
class by its confusable skeleton (`server.names`: "Аlice" in Cyrillic is "Alice"); stored and shown
as text); a class's name is unique on the server the same way and get a personal rejoin code (kept signed, like the instructor's)
for another browser.

Everything of a class is read through its code and an owner id that is a member or an instructor
(`view`): a member sees the classes they joined (`classes_of`), nobody else's. The instructor
renames or removes members, stops any class job, closes the class (no more joining or training
for it; its models may then be evicted like any other) and deletes it.

The class's models (`ClassModel`: member, task, n, accuracy, kept-model token) are the models its
members trained in the class (the jobs they started from it, collected by `sync`) or uploaded while
in it (`add_model`, at most `class_models_per_member` each); while the class is open and not idle
(changed within $SENSVIZ_CLASS_IDLE_DAYS days) they are exempt from the kept store's quota eviction and
expiry (`pins`, set as `KeptStore.pins`), up to the class's own cap ($SENSVIZ_KEPT_CLASS_MB): they still
count against their owner's quota and the store's cap. The assignment's runs (`server.assignments`)
become a sweep folder, `<class dir>/sweeps/class/length_scaling` (`runs/*.json`, `runs.parquet`,
`history.parquet`, `spec.json`: the tables of `sensviz sweep`, with the live monitor's columns),
outside the Experiments page's public results roots; `sensviz fidelity <class dir>/sweeps --scale
class --out page.md` reads it.

Refusals raise `ClassRefused` with one line for the user.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import secrets
import shutil
import time
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sensviz import sweeps
from sensviz.files import FolderLock, write_atomic
from server import assignments, owners
from server.limits import LIMITS, class_idle_seconds
from server.names import check_visible, skeleton

CODE = re.compile(r"[A-Za-z0-9_-]{16,64}")  # fullmatch: a trailing newline is no code
"""What a class code, an instructor code or a rejoin code looks like (checked before any file is opened)."""
NAME_CHARACTERS = "letters, digits, spaces and - _ . '"
_NAME_OK = re.compile(r"^[\w .'-]+$")  # \w: any script's letters and digits, and _
EXPERIMENT = "length_scaling"
MAX_CHAPTER = 99  # a Lab chapter's number
MAX_ANSWER_CHARS = 200  # a prediction is one of the chapter's options
REJOIN_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"
"""A rejoin code's characters: lower case, without the ones read for another (i l o 0 1): typed from paper, read
aloud, in any case (`_rejoin_forms`). 16 of them (79 bits), shown in groups of four."""


def make_rejoin_code() -> str:
    """A fresh rejoin code, as its member is shown it: "abcd-efgh-jkmn-pqrs"."""
    chars = "".join(secrets.choice(REJOIN_ALPHABET) for _ in range(16))
    return "-".join(chars[i:i + 4] for i in range(0, 16, 4))


def _rejoin_forms(typed: str) -> tuple[str, ...]:
    """What a typed rejoin code may have been signed as: as typed (a code made before `make_rejoin_code`: mixed case),
    and its canonical form (lower case, without spaces and hyphens: how a new code is signed)."""
    return typed.strip(), "".join(typed.split()).replace("-", "").lower()


MEMBER_BROWSERS = 8
"""The browsers (owner ids) one member is at once: the one that joined, and the newest that rejoined with the code
(a browser that keeps no cookies is a new one after each reload; the joining one may own the member's run)."""


class ClassRefused(Exception):
    """Something a class does not allow (a taken name, a closed class, no right to do it), with one line for the user."""


@dataclass(frozen=True)
class Member:
    """A member of a class: a random id, the display name, the owner ids of their browsers."""

    id: str
    name: str
    owners: tuple[str, ...]
    rejoin: str  # the signature of their rejoin code
    joined: float
    seat: int  # their place in the order of joining (the assignment deals by it)
    address: str = ""  # the network address they joined from, signed (`ClassStore.address_key`): never shown


@dataclass(frozen=True)
class ClassModel:
    """A model in a class's gallery."""

    token: str  # the kept model's token (`server.kept`)
    member: str  # the member's id
    task: str
    n: int | None
    accuracy: float | None
    name: str  # the model's own name (a run's name or an uploaded file's)
    added: float
    job: str | None = None  # the job that trained it


@dataclass(frozen=True)
class Notice:
    """Something a member is told on every page (`ClassStore.notices`): its kind, the sentence, the cell to train."""

    kind: str  # removed, closed, stopped, continue, assignment
    text: str
    cell: dict | None = None
    job: str | None = None  # continue: the run to continue


@dataclass
class Class:
    """A class as stored (`ClassStore` reads and writes it whole)."""

    code: str
    name: str
    created: float
    instructor: str  # the signature of the current one-time instructor code ("": none, or exchanged)
    instructors: list[str] = field(default_factory=list)  # owner ids that opened the instructor link
    closed: bool = False
    members: list[dict] = field(default_factory=list)
    models: list[dict] = field(default_factory=list)
    jobs: dict[str, dict] = field(default_factory=dict)  # job id -> {"member", "assignment": dict | None, "recorded",
    # and once recorded "finished" (to its last step, by a member still in the class) and "ended" (the job's state)}
    assignment: str | None = None  # the running assignment's name (`server.assignments.ASSIGNMENTS`)
    removed: list[str] = field(default_factory=list)  # owner ids of removed members: they cannot join again (`readmit`)
    ended: bool = False  # the instructor ended the assignment: no more cells dealt, the verdict on the runs in
    address: str = ""  # the network address it was created from, signed (`ClassStore.address_key`)
    votes: dict[str, dict[str, str]] = field(default_factory=dict)  # Lab chapter -> {member id: prediction} (`vote`)
    held: list[int] = field(default_factory=list)  # Lab chapters whose reveal the instructor holds for the class
    released: list[int] = field(default_factory=list)  # Lab chapters the instructor revealed to the class
    active: float = 0.0  # when it last changed (a join, a run, a prediction, the instructor's): `ClassStore.idle`
    offered: dict[str, dict] = field(default_factory=dict)  # member id -> the spare cell they were dealt (`deal`)

    def member_list(self) -> list[Member]:
        return [Member(**{**m, "owners": tuple(m["owners"])}) for m in self.members]

    def model_list(self) -> list[ClassModel]:
        return sorted((ClassModel(**m) for m in self.models), key=lambda m: m.added)

    def member(self, member_id: str) -> Member | None:
        return next((m for m in self.member_list() if m.id == member_id), None)

    def member_of(self, owner: str) -> Member | None:
        return next((m for m in self.member_list() if owner in m.owners), None)

    def is_instructor(self, owner: str) -> bool:
        return owner in self.instructors

    def names(self) -> dict[str, str]:
        """Member id -> display name."""
        return {m["id"]: m["name"] for m in self.members}


def _normal(name: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", name).split())


def check_display_name(name: object) -> str:
    """A display name as stored: NFKC-normalised, whitespace runs as one space; ValueError (one line)
    when it is empty, longer than the `display_name_chars` limit or has other characters than
    `NAME_CHARACTERS`. Uniqueness is the class's check (`ClassStore.join`)."""
    if not isinstance(name, str):
        raise ValueError("a display name must be text")
    text = _normal(name[: 4 * int(LIMITS["display_name_chars"].high)])
    most = int(LIMITS["display_name_chars"].high)
    if not text:
        raise ValueError("choose a display name")
    if len(text) > most or len(_normal(name)) > most:
        raise ValueError(f"a display name has at most {most} characters (limit 'display_name_chars')")
    check_visible(text, "a display name")
    if not _NAME_OK.match(text):
        raise ValueError(f"a display name may only have {NAME_CHARACTERS}")
    return text


def _within(count: int, limit: str, what: str) -> None:
    """`ClassRefused` (one line naming the limit) when `count` is at the named limit already."""
    most = int(LIMITS[limit].high)
    if count >= most:
        raise ClassRefused(f"{most:,} {what} (limit '{limit}'); try again later or ask your instructor")


def check_class_name(name: object) -> str:
    """A class's name as stored (one line, at most the `class_name_chars` limit); ValueError when empty or longer."""
    if not isinstance(name, str):
        raise ValueError("a class name must be text")
    most = int(LIMITS["class_name_chars"].high)
    text = _normal(name[: 4 * most])
    if not text:
        raise ValueError("give the class a name")
    check_visible(text, "a class name")
    if len(text) > most:
        raise ValueError(f"a class name has at most {most} characters (limit 'class_name_chars')")
    return text


def _continued_as(model: dict, job_id: str, manager) -> bool:
    """Whether the gallery's `model` is of a run that the job `job_id` continued (`JobManager.rerun`)."""
    status = manager.status(model["job"]) if model.get("job") else None
    return status is not None and status.rerun == job_id


def _gallery_room(c: Class, member: Member) -> bool:
    """Whether `member` may add a model to the gallery: it is not full, or it is and the network address
    (a member on the server's own machine: the member) holding the most of it, holding more than the
    member's will, gives up its oldest model (removed here). So one address cannot fill the gallery for
    everyone: the gallery refuses only when nobody holds more of it than the adder would."""
    if len(c.models) < LIMITS["class_models"].high:
        return True
    holder = {m.id: m.address or f"member {m.id}" for m in c.member_list()}
    counts = Counter(holder.get(m["member"], "") for m in c.models)
    mine = counts.get(holder[member.id], 0) + 1
    largest = max((h for h in counts if h != holder[member.id]), key=lambda h: counts[h], default=None)
    if largest is None or counts[largest] - 1 < mine:
        return False
    oldest = min((m for m in c.models if holder.get(m["member"], "") == largest), key=lambda m: m["added"])
    c.models.remove(oldest)
    return True


class ClassStore:
    """The classes in `root` (`<data dir>/classes`), signed with the server's `secret`."""

    def __init__(self, root: Path, secret: bytes, clock: Callable[[], float] = time.time, idle_s: float | None = None):
        """`idle_s`: how long a class nobody changed keeps pinning its models (default `class_idle_seconds()`)."""
        self.root = Path(root)
        self.secret = secret
        self.clock = clock
        self.idle_s = idle_s if idle_s is not None else class_idle_seconds()
        self.lock = FolderLock(self.root)  # across the web servers on one data folder
        self._cache: dict[str, tuple[tuple[int, int], Class]] = {}
        self._pins: tuple[float, dict[str, str]] = (-1.0, {})

    # ------------------------------------------------------------------ files

    def folder(self, code: str) -> Path:
        return self.root / code

    def sweep_folder(self, code: str) -> Path:
        """The class's assignment runs as a sweep folder (`sensviz sweep`'s tables)."""
        return self.folder(code) / "sweeps" / "class" / EXPERIMENT

    def _path(self, code: str) -> Path:
        return self.folder(code) / "class.json"

    def get(self, code: object) -> Class | None:
        """The class with this code, or None (malformed code, never made, or deleted)."""
        if not isinstance(code, str) or not CODE.fullmatch(code):
            return None
        path = self._path(code)
        try:
            stat = path.stat()
            key = (stat.st_ino, stat.st_mtime_ns)
            if code in self._cache and self._cache[code][0] == key:
                return self._cache[code][1]
            found = Class(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None
        self._cache[code] = (key, found)
        return found

    def find(self, code_or_name: str) -> Class | None:
        """The class with this code, else the one with exactly this name (the operator's command), else None."""
        return self.get(code_or_name) or next((c for c in self._all() if c.name == code_or_name), None)

    def _to_change(self, code: str) -> Class | None:
        """A copy of the class to change and save (`get`'s object is shared with every reader of this process:
        changing it in place would change a class another thread is iterating over)."""
        found = self.get(code)
        return copy.deepcopy(found) if found is not None else None

    def _save(self, found: Class) -> None:
        found.active = self.clock()
        write_atomic(self._path(found.code), json.dumps(asdict(found)).encode())
        self._cache.pop(found.code, None)
        self._pins = (-1.0, {})

    def _all(self) -> list[Class]:
        if not self.root.is_dir():
            return []
        return [c for c in (self.get(p.name) for p in self.root.iterdir()) if c is not None]

    def _edit(self, code: str, owner: str, change: Callable[[Class], object], instructor: bool = False,
              open_only: bool = False):
        """Apply `change` to the class under the lock and save it; `ClassRefused` when there is no such
        class, it is closed (`open_only`) or `owner` is not its instructor (`instructor`)."""
        with self.lock:
            found = self._to_change(code)
            if found is None:
                raise ClassRefused("there is no such class (the link may be mistyped, or the class was deleted)")
            if instructor and not found.is_instructor(owner):
                raise ClassRefused("only the class's instructor may do that")
            if open_only and found.closed:
                raise ClassRefused(f"the class {found.name} is closed")
            result = change(found)
            self._save(found)
            return result

    # ------------------------------------------------------------------ the instructor

    def _rejoin_signature(self, rejoin: str) -> str:
        """What the store keeps of a rejoin code: the signature of its canonical form (`_rejoin_forms`)."""
        return owners.sign(self.secret, "rejoin", _rejoin_forms(rejoin)[1])

    def address_key(self, address: str | None) -> str:
        """A network address as the store keeps it: signed with the server's secret (so the files name no one's
        address), "" when unknown (a script, the operator)."""
        return owners.address_key(self.secret, address) if address else ""

    def create(self, name: str, owner: str, address: str | None = None) -> Class:
        """A new class named `name` with `owner` as its instructor (no instructor code exists yet: `instructor_code`),
        created from the network `address`: one address creates at most `classes_per_address` classes, and at
        most `classes_per_address_hour` in an hour (an owner id costs nothing; an address does)."""
        name = check_class_name(name)
        key = self.address_key(address)
        with self.lock:
            classes = self._all()
            if len(classes) >= LIMITS["classes"].high:
                raise ClassRefused(f"this server holds {int(LIMITS['classes'].high):,} classes already "
                                   "(limit 'classes'); delete one first")
            if key:
                mine = [c.created for c in classes if c.address == key]
                _within(len(mine), "classes_per_address", "classes were created from your network address")
                _within(sum(self.clock() - t < 3600 for t in mine), "classes_per_address_hour",
                        "classes were created from your network address in the last hour")
            if any(skeleton(c.name) == skeleton(name) for c in classes):
                raise ClassRefused(f"this server has a class named {name}, or a name that looks like it; choose another")
            code = secrets.token_urlsafe(12)
            found = Class(code, name, self.clock(), "", [owner], address=key)
            self.folder(code).mkdir(parents=True, exist_ok=False)
            self._save(found)
        return found

    def instructor_code(self, code: str, owner: str | None) -> str:
        """A new one-time instructor code for the class (the one before it, if unused, is dead from now on),
        for another browser of an instructor or a co-instructor: asked by an instructor (`owner`), or by
        the server's operator (`owner` None: `python -m server instructor-link`, for an instructor who
        lost every browser). The store keeps only its signature; `claim_instructor` exchanges it once."""
        private = secrets.token_urlsafe(24)

        def change(c: Class) -> None:
            c.instructor = owners.sign(self.secret, "instructor", private)

        self._edit(code, owner or "", change, instructor=owner is not None)
        return private

    def claim_instructor(self, code: str, private: object, owner: str) -> bool:
        """Make `owner` an instructor when `private` is the class's current instructor code, which is then
        dead (a browser's history, or anyone who saw it, holds nothing usable); False otherwise."""
        found = self.get(code)
        if found is None or not isinstance(private, str) or not CODE.fullmatch(private):
            return False

        def change(c: Class) -> bool:
            if not c.instructor or not owners.verify(self.secret, "instructor", private, c.instructor):
                return False
            c.instructor = ""
            if owner not in c.instructors:
                c.instructors.append(owner)
            return True

        return self._edit(code, owner, change)

    def revoke_instructor(self, code: str, owner: str, other: str) -> None:
        """An instructor (`owner`) takes another instructor's powers away (`other`: their owner id)."""
        if other == owner:
            raise ClassRefused("you cannot revoke your own instructor rights; ask another instructor")
        self._edit(code, owner, lambda c: c.instructors.remove(other) if other in c.instructors else None, instructor=True)

    def rename(self, code: str, owner: str, member_id: str, name: str) -> None:
        """The instructor renames a member (the new name checked like a new member's)."""
        name = check_display_name(name)

        def change(c: Class):
            self._check_free(c, name, member_id)
            for m in c.members:
                if m["id"] == member_id:
                    m["name"] = name
                    return
            raise ClassRefused("no such member")

        self._edit(code, owner, change, instructor=True)

    def remove(self, code: str, owner: str, member_id: str, manager=None) -> None:
        """The instructor removes a member (their models leave the gallery; their kept models stay theirs; their
        browsers cannot join again, under any name, until the instructor lets them: `readmit`); with the job
        `manager`, their class runs still queued or running are stopped (an assignment run would count for nothing,
        and no model of theirs enters the gallery now). A run that does not stop (a queue that does not answer) leaves
        the others stopped and the removal done: the runs table's Stop is there for it."""
        def change(c: Class):
            gone = c.member(member_id)
            c.removed = (c.removed + list(gone.owners if gone else ()))[-int(LIMITS["class_members"].high):]
            c.members = [m for m in c.members if m["id"] != member_id]
            c.models = [m for m in c.models if m["member"] != member_id]
            return [job_id for job_id, entry in c.jobs.items() if entry["member"] == member_id and not entry["recorded"]]

        for job_id in self._edit(code, owner, change, instructor=True):
            if manager is not None:
                with contextlib.suppress(Exception):  # noqa: BLE001 - one run that does not stop must not keep the others
                    self.stop(code, owner, job_id, manager)

    def readmit(self, code: str, owner: str) -> None:
        """The instructor lets the removed members' browsers join again."""
        self._edit(code, owner, lambda c: c.removed.clear(), instructor=True)

    def close(self, code: str, owner: str, closed: bool = True) -> None:
        """Close (or reopen) the class: closed, nobody joins or trains for it, and its models are no longer pinned."""
        self._edit(code, owner, lambda c: setattr(c, "closed", closed), instructor=True)

    def delete(self, code: str, owner: str) -> None:
        """Delete the class and its folder (its members' kept models stay theirs, no longer pinned)."""
        with self.lock:
            found = self.get(code)
            if found is None or not found.is_instructor(owner):
                raise ClassRefused("only the class's instructor may delete it")
            shutil.rmtree(self.folder(code), ignore_errors=True)
            self._cache.pop(code, None)
            self._pins = (-1.0, {})

    def start_assignment(self, code: str, owner: str, assignment: str) -> None:
        if assignment not in assignments.ASSIGNMENTS:
            raise ClassRefused(f"no assignment named {assignment}")

        def change(c: Class) -> None:
            c.assignment, c.ended = assignment, False

        self._edit(code, owner, change, instructor=True, open_only=True)

    def end_assignment(self, code: str, owner: str) -> None:
        """The instructor ends the assignment: nobody is dealt another run, the verdict is on the runs in."""
        self._edit(code, owner, lambda c: setattr(c, "ended", True), instructor=True)

    # ------------------------------------------------------------------ members

    def _check_free(self, c: Class, name: str, member_id: str | None = None) -> None:
        """`ClassRefused` when another member's name looks like `name` (the same skeleton: `server.names`)."""
        if any(skeleton(m["name"]) == skeleton(name) and m["id"] != member_id for m in c.members):
            raise ClassRefused(f"the name {name} is taken in this class, or one that looks like it; choose another, "
                               "or, if it is yours (another browser, or a reload in one that keeps no cookies), "
                               "give your rejoin code below")

    def join(self, code: str, name: str, owner: str, address: str | None = None) -> tuple[Member, str]:
        """`owner` joins under the display name `name` from the network `address`; returns the member and their
        rejoin code. `ClassRefused` for a closed class, a taken name, a full class, an owner already in it, or
        an address over `class_members_per_address` or `class_joins_per_address_minute`."""
        name = check_display_name(name)
        rejoin = make_rejoin_code()
        key = self.address_key(address)

        def change(c: Class) -> Member:
            if c.member_of(owner) is not None:
                raise ClassRefused(f"you joined this class already, as {c.member_of(owner).name}")
            if owner in c.removed:
                raise ClassRefused("the instructor removed you from this class; ask them to let you join again")
            self._check_free(c, name)
            if len(c.members) >= LIMITS["class_members"].high:
                raise ClassRefused(f"the class is full ({int(LIMITS['class_members'].high)} members, limit 'class_members')")
            if key:
                mine = [m["joined"] for m in c.members if m.get("address") == key]
                _within(len(mine), "class_members_per_address", "members joined this class from your network address")
                _within(sum(self.clock() - t < 60 for t in mine), "class_joins_per_address_minute",
                        "members joined this class from your network address in the last minute")
            seat = max((m["seat"] for m in c.members), default=-1) + 1
            member = Member(secrets.token_urlsafe(9), name, (owner,), self._rejoin_signature(rejoin),
                            self.clock(), seat, key)
            c.members.append({**asdict(member), "owners": [owner]})
            return member

        return self._edit(code, owner, change, open_only=True), rejoin

    def rejoin(self, code: str, rejoin: object, owner: str) -> Member:
        """Another browser (`owner`) of the member whose rejoin code this is; `ClassRefused` when it is no member's."""
        found = self.get(code)
        forms = _rejoin_forms(rejoin) if isinstance(rejoin, str) and len(rejoin) <= 200 else ()
        if found is None or not any(CODE.fullmatch(form) for form in forms):
            raise ClassRefused("that is not a rejoin code of this class")
        match = next((m for m in found.members if any(owners.verify(self.secret, "rejoin", form, m["rejoin"])
                                                      for form in forms if CODE.fullmatch(form))), None)
        if match is None:
            raise ClassRefused("that is not a rejoin code of this class")
        current = found.member_of(owner)
        if current is not None and current.id != match["id"]:
            raise ClassRefused(f"this browser is in the class already, as {current.name}")

        def change(c: Class) -> None:
            for m in c.members:
                if m["id"] == match["id"] and owner not in m["owners"]:  # the joining browser stays, and the newest
                    m["owners"] = m["owners"][:1] + (m["owners"][1:] + [owner])[1 - MEMBER_BROWSERS:]

        self._edit(code, owner, change)
        return self.get(code).member(match["id"])

    def new_rejoin_code(self, code: str, owner: str, member_id: str | None = None) -> str:
        """A new rejoin code for the member whose browser `owner` is, or, asked by the instructor `owner`, for the
        member `member_id` (one who lost theirs: a browser without cookies that was reloaded); the one before it is
        dead from now on."""
        rejoin = make_rejoin_code()

        def change(c: Class) -> None:
            me = c.member(member_id) if member_id is not None else c.member_of(owner)
            if me is None:
                raise ClassRefused("no such member" if member_id is not None else "only the class's members have a rejoin code")
            next(m for m in c.members if m["id"] == me.id)["rejoin"] = self._rejoin_signature(rejoin)

        self._edit(code, owner, change, instructor=member_id is not None)
        return rejoin

    def view(self, code: object, owner: str) -> Class | None:
        """The class when `owner` is one of its members or instructors, else None (nothing of it is shown)."""
        found = self.get(code)
        if found is None or not (found.is_instructor(owner) or found.member_of(owner) is not None):
            return None
        return found

    def classes_of(self, owner: str) -> list[Class]:
        """The classes `owner` joined or instructs, newest first."""
        return sorted((c for c in self._all() if c.is_instructor(owner) or c.member_of(owner) is not None),
                      key=lambda c: c.created, reverse=True)

    # ------------------------------------------------------------------ the Lab's predictions (peer instruction)

    def vote(self, code: str, owner: str, chapter: int, answer: str) -> None:
        """A member's current prediction for a Lab chapter (the latest counts); only counts leave the store."""
        if not isinstance(chapter, int) or not 1 <= chapter <= MAX_CHAPTER or not isinstance(answer, str) \
                or not 0 < len(answer) <= MAX_ANSWER_CHARS:
            raise ClassRefused("that is not a prediction of a Lab chapter")

        def change(c: Class) -> None:
            me = c.member_of(owner)
            if me is None:
                raise ClassRefused("only the class's members predict for it")
            c.votes.setdefault(str(chapter), {})[me.id] = answer

        self._edit(code, owner, change, open_only=True)

    def votes_of(self, code: str, owner: str) -> dict[int, str]:
        """The predictions of the member whose browser `owner` is, per chapter (their own, for their Lab to show again
        after a reload or a restart; nobody else's)."""
        found = self.get(code)
        me = found.member_of(owner) if found is not None else None
        if me is None:
            return {}
        return {int(chapter): answers[me.id] for chapter, answers in found.votes.items() if me.id in answers}

    def tally(self, code: str) -> dict[int, dict[str, int]]:
        """Each chapter's predictions as counts per answer (who predicted what is never given out)."""
        found = self.get(code)
        if found is None:
            return {}
        present = set(found.names())
        return {int(chapter): dict(Counter(a for m, a in votes.items() if m in present))
                for chapter, votes in sorted(found.votes.items(), key=lambda kv: int(kv[0]))}

    def hold(self, code: str, owner: str, chapter: int, held: bool = True) -> None:
        """The instructor holds a chapter's reveal for the class (`held`) or reveals it to the class (False)."""
        def change(c: Class) -> None:
            c.held = sorted(set(c.held) | {chapter}) if held else [h for h in c.held if h != chapter]
            if not held:
                c.released = sorted(set(c.released) | {chapter})

        self._edit(code, owner, change, instructor=True)

    # ------------------------------------------------------------------ models and jobs

    def add_model(self, code: str, owner: str, token: str, task: str, n: int | None, accuracy: float | None,
                  name: str, job: str | None = None) -> None:
        """A member's model enters the class's gallery (once per token)."""
        def change(c: Class):
            member = c.member_of(owner)
            if member is None:
                raise ClassRefused("only the class's members add models to it")
            if any(m["token"] == token for m in c.models):
                return
            if not _gallery_room(c, member):
                raise ClassRefused(f"the class's gallery is full ({int(LIMITS['class_models'].high):,} models, limit "
                                   "'class_models'), and no network address holds more of it than yours")
            _within(sum(m["member"] == member.id for m in c.models), "class_models_per_member",
                    "of your models are in the class's gallery already")
            c.models.append(asdict(ClassModel(token, member.id, str(task), n, accuracy, str(name)[:120], self.clock(),
                                              job)))

        self._edit(code, owner, change, open_only=True)

    def add_job(self, code: str, owner: str, job_id: str, task: str, n: int | None, assignment: dict | None) -> None:
        """A job a member started from the class (with the assignment's cell it trains, if any)."""
        def change(c: Class):
            member = c.member_of(owner)
            if member is None:
                raise ClassRefused("only the class's members train for it")
            c.jobs[job_id] = {"member": member.id, "task": str(task), "n": n, "assignment": assignment,
                              "recorded": False}

        self._edit(code, owner, change, open_only=True)

    def idle(self, found: Class) -> bool:
        """Whether nobody changed the class for `idle_s` seconds (then it no longer pins its models)."""
        return self.clock() - max(found.created, found.active) > self.idle_s

    def pins(self) -> dict[str, str]:
        """The kept models the classes pin (token -> class code: `server.kept.KeptStore.pins`, which pins each
        class's earliest up to its cap): those in the gallery of a class that is open and not idle. A closed
        or idle class's models expire and are evicted like any other. Found again after 2 s or a change."""
        now = self.clock()
        stamp, tokens = self._pins
        if not 0 <= now - stamp <= 2.0:
            tokens = {m["token"]: c.code for c in self._all() if not c.closed and not self.idle(c) for m in c.models}
            self._pins = (now, tokens)
        return tokens

    # ------------------------------------------------------------------ the class's jobs

    def sync(self, code: str, manager) -> int:
        """Collect the class's ended jobs (`server.jobs.JobManager`): each kept model enters the
        gallery, each assignment run becomes a row of the class's sweep folder (`write_tables`).
        Returns how many jobs were collected; safe to call from every session (one at a time)."""
        with self.lock:
            found = self._to_change(code)
            if found is None:
                return 0
            ended = {job_id: (entry, manager.status(job_id)) for job_id, entry in found.jobs.items()
                     if not entry["recorded"]}
            ended = {j: (e, s) for j, (e, s) in ended.items() if s is None or not s.active}
            if not ended:
                return 0
            wrote = False
            names = found.names()
            for job_id, (entry, status) in ended.items():
                entry["recorded"] = True
                entry["finished"] = status is not None and status.state == "finished" and entry["member"] in names
                entry["ended"] = status.state if status is not None else "gone"  # how the run ended (the gallery says)
                if status is None:
                    continue
                if status.ended_by_restart:  # to be continued by one of its member's browsers (`waiting_to_continue`)
                    entry["restart"] = {"owner": status.owner, "step": status.resume_step,
                                        "settings_kept": manager.request(job_id) is not None}
                records = manager.records(job_id)
                accuracy = records[-1].get("accuracy") if records else None  # the final weights' measurement
                member = found.member(entry["member"])
                if status.kept:  # a run that went on after a restart: its stopped part leaves the gallery
                    found.models = [m for m in found.models if not _continued_as(m, job_id, manager)]
                if status.kept and member and not any(m["token"] == status.kept for m in found.models) \
                        and sum(m["member"] == member.id for m in found.models) < LIMITS["class_models_per_member"].high \
                        and _gallery_room(found, member):
                    found.models.append(asdict(ClassModel(status.kept, entry["member"], entry["task"], entry["n"],
                                                          accuracy, status.name, self.clock(), job_id)))
                if entry["assignment"] and found.assignment in assignments.ASSIGNMENTS and entry["member"] in names:
                    a = assignments.ASSIGNMENTS[found.assignment]  # a removed member's run counts for nothing
                    row = assignments.record(a, entry["assignment"], records, status.state,
                                             status.error or status.reason, status.steps, status.seconds, self.clock(),
                                             member=(entry["member"], names[entry["member"]]))
                    self._write_run(code, job_id, a, row)
                    wrote = True
            if wrote:
                sweeps.write_tables(self.sweep_folder(code))
            self._save(found)
            return len(ended)

    def record_ended(self, job_id: str, manager) -> None:
        """A job ended (`JobManager.on_ended`, in the manager's thread): when it is a class's, `sync` that
        class now, so its run is in the class's table without waiting for a member's page."""
        for found in self._all():
            if job_id in found.jobs and not found.jobs[job_id]["recorded"]:
                self.sync(found.code, manager)
                return

    def deal(self, code: str, manager) -> dict[str, dict]:
        """Each member's cell of the running assignment (member id -> cell; {} without one). A member
        whose assignment run is queued or running keeps its cell; a member keeps the cell of their seat while
        nobody finished or holds it (the run they were told to train stays theirs while others finish); every
        other member, in the order they joined, gets the next cell nobody holds (`Assignment.deal_open`): not
        finished by a member, nor queued or running, nor another's. So a member who finished takes the next
        unclaimed run, a removed member's unfinished cell goes to the next member who asks, and a class of any
        size completes the grid (a larger one gets more seeds; an absent member's cell waits for them, and the
        instructor's Remove frees it). A spare cell dealt to a member who finished (not their seat's) is kept as
        theirs (`Class.offered`) until they train it or it is done: a member who joins later, whose seat's cell it
        is, is dealt another, so the next run a member was told does not change under them. A finished cell stays
        done when its member was removed afterwards (its row is in the class's table); a member's run that a server
        restart ended holds its cell for them until they continue it (`waiting_to_continue`), so they are not dealt
        it again from step 0."""
        found = self.get(code)
        if found is None or found.assignment not in assignments.ASSIGNMENTS or found.ended:
            return {}
        names, held, done = found.names(), {}, []
        for job_id, entry in found.jobs.items():
            cell = entry["assignment"]
            if not cell:
                continue
            if entry.get("finished"):
                done.append(cell)
            elif (entry["member"] in names and not entry["recorded"] and (status := manager.status(job_id)) is not None
                  and status.active):
                held[entry["member"]] = cell
        for member_id in names:  # in the order they joined: a cell held twice (dealt again before) goes to the first
            waiting = self._stopped_by_restart(found, member_id) if member_id not in held else None
            cell = found.jobs[waiting]["assignment"] if waiting is not None else None
            if cell is not None and cell not in done and cell not in held.values():
                held[member_id] = cell
        training = dict(held)
        for member_id, cell in found.offered.items():  # a spare cell a member was told stays theirs
            if member_id in names and member_id not in held and cell not in done and cell not in held.values():
                held[member_id] = cell
        a = assignments.ASSIGNMENTS[found.assignment]
        seats = {m.id: m.seat for m in sorted(found.member_list(), key=lambda m: m.seat)}
        dealt = a.deal_open(seats, done, held)
        offered = {m: cell for m, cell in dealt.items() if m not in training and cell != a.deal(seats[m])}
        if offered != found.offered:  # kept, so a member who joins later (whose seat's cell it may be) does not take it
            with self.lock:
                fresh = self._to_change(code)
                if fresh is not None:
                    fresh.offered = offered
                    self._save(fresh)
        return dealt

    @staticmethod
    def _stopped_by_restart(found: Class, member_id: str) -> str | None:
        """The id of the member's latest assignment run when a server restart ended it (`sync` recorded it so) and one
        of the member's browsers can continue it (its owner is one, its settings were kept): nothing since, so not
        continued either (a continuation is the member's next run). Read from the class alone: no job is asked."""
        member = found.member(member_id)
        latest = next((job_id for job_id, entry in reversed(found.jobs.items())
                       if entry["member"] == member_id and entry["assignment"]), None)
        restart = found.jobs[latest].get("restart") if latest is not None else None
        if member is None or not restart or not restart["settings_kept"] or restart["owner"] not in member.owners:
            return None
        return latest

    def waiting_to_continue(self, code: str, member_id: str, manager) -> str | None:
        """The id of the member's run that a server restart ended and that waits for them to continue it
        (`JobManager.rerun`): its cell is the one `deal` holds for them (not finished by another since, nor held by
        another), so the notice, the Class page and the deal say the same."""
        found = self.get(code)
        job_id = self._stopped_by_restart(found, member_id) if found is not None else None
        if job_id is None or self.deal(code, manager).get(member_id) != found.jobs[job_id]["assignment"]:
            return None
        return job_id

    def _write_run(self, code: str, job_id: str, a, row: dict) -> None:
        """One row per job: the run id is the cell's settings and the job, so a rerun of a cell adds a row."""
        folder = self.sweep_folder(code)
        rid = sweeps.run_id({**row["settings"], "job": job_id})
        write_atomic(folder / "runs" / f"{rid}.json", json.dumps({"run_id": rid, "traceback": None, "spec_hash": None,
                                                                   **row}, default=float).encode())
        if not (folder / "spec.json").is_file():
            write_atomic(folder / "spec.json", json.dumps({
                "experiment": EXPERIMENT, "name": f"class {code}", "scale": "class", "source": "length_scaling.toml",
                "description": a.title}).encode())

    def stop(self, code: str, owner: str, job_id: str, manager) -> bool:
        """The instructor stops (or cancels) any job of the class; True when it was stopped."""
        found = self.get(code)
        if found is None or not found.is_instructor(owner):
            raise ClassRefused("only the class's instructor may stop its members' runs")
        status = manager.status(job_id) if job_id in found.jobs else None
        if status is None or not manager.stop(job_id, status.owner):
            return False
        self._edit(code, owner, lambda c: c.jobs[job_id].update(stopped_by="the instructor") if job_id in c.jobs else None)
        return True

    def notices(self, code: str, owner: str, manager) -> list[Notice]:
        """What the room must be told, for the browser `owner` (shown on every page, without a reload):
        that the instructor removed them, closed the class, stopped their latest run, that a restart stopped their
        assignment run and it waits to be continued (`waiting_to_continue`, with the run), or that the instructor
        started the assignment, with their cell, while no run of theirs for it trains (after one: their next cell,
        which the Class page shows too)."""
        found = self.get(code)
        if found is None:
            return []
        if owner in found.removed:
            return [Notice("removed", f"The instructor removed you from the class {found.name}.")]
        me = found.member_of(owner)
        if me is None:
            return []
        if found.closed:
            return [Notice("closed", f"The class {found.name} is closed: no more training for it.")]
        told, mine = [], [(j, e) for j, e in found.jobs.items() if e["member"] == me.id]
        if mine and mine[-1][1].get("stopped_by"):
            entry = mine[-1][1]
            told.append(Notice("stopped", f"Your run ({entry['task']}, n = {entry['n']}) was stopped by {entry['stopped_by']}."))
        ran = [job_id for job_id, e in mine if e["assignment"]]
        training = any((status := manager.status(job_id)) is not None and status.active for job_id in ran)
        waiting = self.waiting_to_continue(code, me.id, manager) if ran and not training else None
        if waiting is not None:
            entry = found.jobs[waiting]
            step = entry["restart"]["step"]
            where = (f"from step {step:,}, exactly as it would have gone on" if step is not None
                     else "again from step 0 (it had no snapshot to go on from)")
            told.append(Notice("continue", f"A restart of the server stopped your run ({entry['task']}, n = {entry['n']}): "
                               f"the button below runs it {where}.", entry["assignment"], waiting))
        elif found.assignment in assignments.ASSIGNMENTS and not training:
            cell = self.deal(code, manager).get(me.id)
            if cell is not None:
                said = ("The class's assignment takes more runs: your next" if ran else
                        "The instructor started the assignment: your run")
                told.append(Notice("assignment", f"{said} is {cell['task']} at n = {cell['n']} with seed {cell['seed']}.",
                                   cell))
        return told

    def job_rows(self, code: str, manager) -> list[dict]:
        """The class's jobs for the instructor: member (a removed one's "(removed)"; `member_id` the id), setting, state,
        progress, reason."""
        found = self.get(code)
        if found is None:
            return []
        names, rows = found.names(), []
        for job_id, entry in found.jobs.items():
            status = manager.status(job_id)
            progress = status.progress if status else {}
            rows.append({"job": job_id, "member": names.get(entry["member"], "(removed)"), "member_id": entry["member"],
                         "task": entry["task"], "n": entry["n"], "seed": (entry["assignment"] or {}).get("seed"),
                         "state": ("continued" if status.rerun else status.state) if status else "gone",
                         "step": f"{progress.get('step', 0)} of {progress.get('steps', '?')}" if progress else "",
                         "reason": (status.error or status.reason or "") if status else ""})
        return rows
