"""The class server's own limits: what one owner, one network address and one class may hold on a
shared server (the kept-model store, classes, their members and galleries). The library's limits
(model sizes, inputs, files: `sensviz.limits`) know no owner, class or queue; the training budget
per job is `server.budget`'s.

Two kinds:

- `LIMITS`: fixed bounds, checked with `within` (one line naming the limit on refusal); tests may
  narrow one with `monkeypatch.setitem(LIMITS, name, Limit(...))`.
- Settings of the kept-model store, read from the environment when a store is built (each a positive
  number; a bad value is one line naming the variable). Their defaults hold for a class of 60 behind
  one NAT on the default 1,024 MiB store: the address share (half the cap, 512 MiB) holds 8 MiB for
  each of 60 students (a test keeps 60 owners' models from one address), and a class's gallery pins at
  most a quarter of the cap (256 MiB). A larger class, or larger models, need a larger cap.

| setting | default | what |
|---|---|---|
| `SENSVIZ_KEPT_CAP_MB` | 1024 | all kept files together |
| `SENSVIZ_KEPT_QUOTA_MB` | cap / 4 | one owner (a browser) |
| `SENSVIZ_KEPT_ADDRESS_QUOTA_MB` | cap / 2 | the owners of one network address together |
| `SENSVIZ_KEPT_CLASS_MB` | cap / 4 | the models one open class pins (its gallery) |
| `SENSVIZ_KEPT_TTL_DAYS` | 30 | a model nobody opened expires |
| `SENSVIZ_CLASS_IDLE_DAYS` | 14 | a class nobody changed (joined, trained, predicted) stops pinning its models |

The training queue's cap per address, `SENSVIZ_MAX_JOBS_PER_ADDRESS` (`server.jobs.max_per_address`),
defaults to `DEFAULT_JOBS_PER_ADDRESS`: a class of 60 behind one NAT, one run each, fits; the queue's
other 40 places stay for everyone else.
"""

from __future__ import annotations

import os

from sensviz.limits import Limit, MiB

DAY_S = 86_400
DEFAULT_CAP_MB = 1024
DEFAULT_QUOTA_SHARE = 4
"""Without $SENSVIZ_KEPT_QUOTA_MB, one owner may hold 1/4 of the cap."""
DEFAULT_ADDRESS_SHARE = 2
"""Without $SENSVIZ_KEPT_ADDRESS_QUOTA_MB, the owners of one address may hold 1/2 of the cap together."""
DEFAULT_CLASS_SHARE = 4
"""Without $SENSVIZ_KEPT_CLASS_MB, one class's gallery pins at most 1/4 of the cap."""
DEFAULT_TTL_DAYS = 30
DEFAULT_CLASS_IDLE_DAYS = 14
DEFAULT_JOBS_PER_ADDRESS = 60
"""Without $SENSVIZ_MAX_JOBS_PER_ADDRESS, one client address may have 60 runs queued or running."""

_ALL = (
    # kept models (server.kept)
    Limit("kept_models", 1, 200, "models one user keeps on a server (their least recently opened go first)"),
    Limit("kept_meta_bytes", 1, 64 * 1024, "metadata of one kept model: its name and loading overrides"),
    # classes (server.classes)
    Limit("class_name_chars", 1, 80, "characters of a class's name"),
    Limit("display_name_chars", 1, 40, "characters of a member's display name in a class"),
    Limit("class_members", 1, 200, "members of one class"),
    Limit("classes", 1, 1000, "classes on one server"),
    Limit("class_models", 1, 2000, "models listed in one class's gallery"),
    Limit("class_models_per_member", 1, 40, "models one member adds to a class's gallery"),
    Limit("classes_per_address", 1, 20, "classes created from one network address (open or closed, until deleted)"),
    Limit("classes_per_address_hour", 1, 5, "classes created from one network address in an hour"),
    Limit("class_members_per_address", 1, 80, "members of one class who joined from one network address (a class "
          "of 60 behind one NAT fits)"),
    Limit("class_joins_per_address_minute", 1, 60, "joins of one class from one network address in a minute (a "
          "class of 60 behind one NAT joining at once fits)"),
)

LIMITS: dict[str, Limit] = {limit.name: limit for limit in _ALL}
"""Every server limit by name."""


def most(name: str) -> int:
    """The named limit's upper bound as an int."""
    return int(LIMITS[name].high)


def setting(name: str, default: float) -> float:
    """The positive number in the environment variable `name`, else `default`; ValueError (one line) otherwise."""
    value = os.environ.get(name)
    try:
        number = float(value) if value else float(default)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {value[:40]!r}") from None
    if not number > 0:
        raise ValueError(f"{name} must be above 0, got {value}")
    return number


def cap_bytes() -> int:
    """The kept models' total size cap: $SENSVIZ_KEPT_CAP_MB MiB (default 1024)."""
    return int(setting("SENSVIZ_KEPT_CAP_MB", DEFAULT_CAP_MB) * MiB)


def _share(name: str, cap: int, share: int) -> int:
    return min(cap, int(setting(name, cap / share / MiB) * MiB))


def quota_bytes(cap: int) -> int:
    """What one owner may hold: $SENSVIZ_KEPT_QUOTA_MB MiB (default a quarter of the cap), at most the cap."""
    return _share("SENSVIZ_KEPT_QUOTA_MB", cap, DEFAULT_QUOTA_SHARE)


def address_quota_bytes(cap: int) -> int:
    """What the owners of one network address may hold together: $SENSVIZ_KEPT_ADDRESS_QUOTA_MB MiB
    (default half the cap: 8 MiB for each of a class of 60 behind one NAT on the default store)."""
    return _share("SENSVIZ_KEPT_ADDRESS_QUOTA_MB", cap, DEFAULT_ADDRESS_SHARE)


def class_bytes(cap: int) -> int:
    """The most one open class's gallery pins: $SENSVIZ_KEPT_CLASS_MB MiB (default a quarter of the cap)."""
    return _share("SENSVIZ_KEPT_CLASS_MB", cap, DEFAULT_CLASS_SHARE)


def ttl_seconds() -> float:
    """How long a model that nobody opens is kept: $SENSVIZ_KEPT_TTL_DAYS days (default 30)."""
    return setting("SENSVIZ_KEPT_TTL_DAYS", DEFAULT_TTL_DAYS) * DAY_S


def class_idle_seconds() -> float:
    """How long a class nobody changed keeps pinning its models: $SENSVIZ_CLASS_IDLE_DAYS days (default 14)."""
    return setting("SENSVIZ_CLASS_IDLE_DAYS", DEFAULT_CLASS_IDLE_DAYS) * DAY_S
