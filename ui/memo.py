"""The mechanism of the explorer's one caching rule (written at the top of `ui.cache`): `Store`, a
thread-safe LRU map whose missed key is computed once however many sessions ask at once, and
`memo`, which keeps a function's results in the server's store of computed values."""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable

import streamlit as st

log = logging.getLogger("sensviz.explorer")


class Store:
    """A thread-safe LRU map from keys to computed values; a missed key is computed once (a lock
    per key), while other keys stay readable. Bounded by entries, or with `weigh` by the sum of the
    values' weights (the newest value stays even when it alone is over `max_weight`)."""

    def __init__(self, max_entries: int | None = None, max_weight: int | None = None,
                 weigh: Callable[[object], int] | None = None):
        self.max_entries = max_entries
        self.max_weight = max_weight
        self.weigh = weigh
        self.weights: dict = {}  # key -> weight of its value (with `weigh`)
        self.weight = 0
        self.values: OrderedDict = OrderedDict()
        self.lock = threading.Lock()
        self.key_locks: dict = {}  # key -> [lock, number of threads using it]
        self.computed: Counter = Counter()  # function name -> computations

    def get_or_compute(self, key: tuple, compute: Callable[[], object]):
        with self.lock:
            if key in self.values:
                self.values.move_to_end(key)
                return self.values[key]
            entry = self.key_locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                with self.lock:
                    if key in self.values:  # computed by another thread while this one waited
                        self.values.move_to_end(key)
                        return self.values[key]
                start = time.perf_counter()
                value = compute()
                weight = self.weigh(value) if self.weigh else 0
                with self.lock:
                    self.values[key] = value
                    self.weights[key] = weight
                    self.weight += weight
                    self.computed[key[0]] += 1
                    while len(self.values) > 1 and self._over():
                        old, _ = self.values.popitem(last=False)
                        self.weight -= self.weights.pop(old)
                log.info("computed %s in %.3f s", _describe(key), time.perf_counter() - start)
                return value
        finally:
            with self.lock:
                entry[1] -= 1
                if entry[1] == 0:
                    self.key_locks.pop(key, None)


    def _over(self) -> bool:
        return ((self.max_entries is not None and len(self.values) > self.max_entries)
                or (self.max_weight is not None and self.weight > self.max_weight))


def _describe(key: tuple) -> str:
    """`name(arg=value, ...)` of a `memo` key, models by their link."""
    name, *arguments = key
    shown = (f"{a[0]}={getattr(a[1], 'param', None) or repr(a[1])}" if isinstance(a, tuple) and len(a) == 2
             else repr(a) for a in arguments)
    return f"{name}({', '.join(shown)})"


@st.cache_resource(show_spinner=False)
def _store() -> Store:
    return Store(max_entries=256)  # computed results: tables, reports, traces


def stats() -> dict[str, int]:
    """Computations per cached function since the server started (or the caches were cleared)."""
    return dict(_store().computed)


def keyed(key: tuple, compute: Callable[[], object]):
    """The store's value under `key`, computed by `compute()` when missing: for a key its caller builds from
    everything the value depends on (`ui.cache.spec`: a chart function and its arguments, tables by content)."""
    return _store().get_or_compute(key, compute)


def memo(fn):
    """Cache `fn` in the store under its name and bound arguments (not `progress`)."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def cached(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = (fn.__name__, *((k, v) for k, v in bound.arguments.items() if k != "progress"))
        try:
            hash(key)
        except TypeError as err:
            raise TypeError(f"{fn.__name__}: every argument must be hashable to be a cache key ({err})") from None
        return _store().get_or_compute(key, lambda: fn(*bound.args, **bound.kwargs))

    return cached
