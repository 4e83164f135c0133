"""Typed settings: dataclasses whose fields carry their help and range, checked by one function.

A settings dataclass (`TrainConfig`, `MeasureSettings`, an experiment's own settings) declares each
field with `setting(default, help, limit="batch_size")` (a named limit of `sensviz.limits`) or
`setting(default, help, low=..., high=...)`. From those fields alone:

- `check(instance)` validates every value against its annotated type (int, float, bool, str, each
  optionally `| None`; an int is never a bool, a float is finite) and its range, with one readable
  line per problem naming the limit (call it from `__post_init__`);
- `build(cls, values)` makes an instance from a dict, naming unknown keys and the known ones;
- `split(values, classes)` routes the keys of one flat dict (a sweep run's settings, a form) to
  the classes whose fields they name;
- `add_arguments(parser, cls)` writes one command-line flag per field (`batch_size` ->
  `--batch-size`, with its help, type and default) and `from_arguments(cls, args)` reads them back;
- `settings_of(cls)` lists the fields with their metadata, for forms (the Train page).

So a field is listed once, in its dataclass, and every consumer follows it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from .limits import LIMITS, Limit, check_float, check_int

_NO_DEFAULT = dataclasses.MISSING


def setting(default=_NO_DEFAULT, help: str = "", *, limit: str | None = None, low: float | None = None,
            high: float | None = None, positive: bool = False, choices: Iterable | None = None, flag: bool = True):
    """A dataclass field with its help text and range: a named limit of `sensviz.limits` (`limit`),
    or `low <= value <= high` (`positive`: value > low = 0), `choices` for a closed set;
    `flag=False` keeps it off the command line."""
    if limit is not None:
        bounds = LIMITS[limit]
    elif low is not None or high is not None or positive:
        bounds = Limit("", 0.0 if positive else (-math.inf if low is None else low),
                       math.inf if high is None else high, help, open_low=positive)
    else:
        bounds = None
    metadata = {"help": help, "limit": bounds, "choices": tuple(choices) if choices is not None else None,
                "flag": flag}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Setting:
    """One field of a settings dataclass, with its resolved type."""

    name: str
    type: type  # int, float, bool or str
    optional: bool  # None allowed
    default: Any
    help: str
    limit: Limit | None  # the range of a number
    choices: tuple | None
    flag: bool

    def describe_range(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        if self.limit is None:
            return ""
        low, high = self.limit.low, self.limit.high
        parts = [f"> {low:g}" if self.limit.open_low else f">= {low:g}"] if math.isfinite(low) else []
        parts += [f"<= {high:g}"] if math.isfinite(high) else []
        return " and ".join(parts)

    def check(self, value, owner: str = "") -> None:
        """Raise ValueError (one line, naming the setting and its range) for a value it does not take."""
        where = f"{owner}: {self.name}" if owner else self.name
        if value is None:
            if not self.optional:
                raise ValueError(f"{where} must be set ({_a(self.type)})")
            return
        if self.type in (int, float):
            limit = self.limit or Limit("", -math.inf, math.inf, "")
            (check_int if self.type is int else check_float)(where, value, limit)
        elif not isinstance(value, self.type):
            raise ValueError(f"{where} must be {_a(self.type)}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{where} must be {self.describe_range()}, got {value!r}")


def _a(kind: type) -> str:
    """'an int', 'a float', ... for messages."""
    name = kind.__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _resolve(annotation) -> tuple[type, bool]:
    """(base type, optional) of `int`, `float | None`, `typing.Optional[str]`, ..."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) != 1:
            raise TypeError(f"a setting has one type (optionally | None), got {annotation}")
        return kinds[0], type(None) in args
    return annotation, False


@cache
def settings_of(cls: type) -> tuple[Setting, ...]:
    """The fields of a settings dataclass, in order, with their types and metadata."""
    hints = typing.get_type_hints(cls)
    found = []
    for f in dataclasses.fields(cls):
        kind, optional = _resolve(hints[f.name])
        meta = f.metadata
        default = f.default if f.default is not _NO_DEFAULT else (
            f.default_factory() if f.default_factory is not _NO_DEFAULT else _NO_DEFAULT)
        found.append(Setting(f.name, kind, optional, default, meta.get("help", ""), meta.get("limit"),
                             meta.get("choices"), meta.get("flag", True)))
    return tuple(found)


def field_names(cls: type) -> tuple[str, ...]:
    return tuple(s.name for s in settings_of(cls))


def check(instance) -> None:
    """Validate every field of a settings dataclass instance (see `Setting.check`)."""
    owner = type(instance).__name__
    for s in settings_of(type(instance)):
        s.check(getattr(instance, s.name), owner)


def build(cls: type, values: dict, what: str = ""):
    """An instance of `cls` from a dict of its fields; ValueError for unknown keys or bad values."""
    known = field_names(cls)
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"{what or cls.__name__}: unknown settings {unknown}; known: {sorted(known)}")
    try:
        return cls(**values)
    except TypeError as err:  # a required field is missing
        raise ValueError(f"{what or cls.__name__}: {err}") from None


def split(values: dict, classes: dict[str, type], what: str = "settings") -> dict[str, dict]:
    """Route a flat dict's keys to the classes whose fields they name: `{part: {key: value}}`.

    `classes` maps a part's name to its dataclass, in priority order (a key that two classes know
    goes to the first). Unknown keys raise ValueError listing every known key.
    """
    parts: dict[str, dict] = {name: {} for name in classes}
    owners = {}
    for name, cls in classes.items():
        for key in field_names(cls):
            owners.setdefault(key, name)
    unknown = sorted(set(values) - set(owners))
    if unknown:
        raise ValueError(f"{what}: unknown settings {unknown}; known: {sorted(owners)}")
    for key, value in values.items():
        parts[owners[key]][key] = value
    return parts


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parse(s: Setting):
    """The argparse `type` of a setting: its own type, checked against its range at parse time."""

    def parse(text: str):
        if s.optional and text.lower() == "none":
            return None
        try:
            value = s.type(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {_a(s.type)}, got {text!r}") from None
        try:
            s.check(value)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err).split(": ", 1)[-1]) from None
        return value

    parse.__name__ = s.type.__name__
    return parse


def add_arguments(parser: argparse.ArgumentParser, cls: type, exclude: Iterable[str] = (), defaults: dict | None = None,
                  required: Iterable[str] = ()) -> None:
    """One flag per field of `cls` (except `exclude` and fields declared `flag=False`): its help,
    range and default. `defaults` replaces some defaults; `required` makes flags mandatory."""
    exclude, required, defaults = set(exclude), set(required), defaults or {}
    for s in settings_of(cls):
        if s.name in exclude or not s.flag:
            continue
        default = defaults.get(s.name, s.default)
        help_text = s.help + (f" ({s.describe_range()})" if s.describe_range() and s.choices is None else "")
        if s.type is bool and not s.optional:
            parser.add_argument(_flag(s.name), action=argparse.BooleanOptionalAction, default=default, help=help_text)
            continue
        kwargs = {"type": _parse(s), "help": help_text + ("" if default in (None, _NO_DEFAULT) else f"; default {default}")}
        if s.choices is not None:
            kwargs["choices"] = s.choices
        if s.name in required:
            kwargs["required"] = True
        else:
            kwargs["default"] = None if default is _NO_DEFAULT else default
        parser.add_argument(_flag(s.name), dest=s.name, **kwargs)


def from_arguments(cls: type, args: argparse.Namespace, exclude: Iterable[str] = (), **extra):
    """An instance of `cls` from parsed flags (`add_arguments`), plus `extra` fields."""
    exclude = set(exclude)
    values = {s.name: getattr(args, s.name) for s in settings_of(cls)
              if s.flag and s.name not in exclude and hasattr(args, s.name)}
    return build(cls, {**values, **extra})
