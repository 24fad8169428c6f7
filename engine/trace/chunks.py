"""Step columns gathered while a JSONL trace is parsed (engine/trace/jsonl.py): the third column source
of the screen (engine/trace/screen.py), beside DictColumns and the Parquet reader's ArrowColumns.

Kept apart from the screen because it is about *reading fast* (packing values into buffers while
they are still in the CPU cache), not about the rules; `_ChunkColumns` answers the same questions as
`DictColumns` so that `screen_steps` applies one set of rules to every source.
"""

from __future__ import annotations

import struct
from itertools import chain, repeat
from operator import is_not, itemgetter
from typing import Any

import numpy as np

from engine.trace.check import INT_FIELDS, TIME_FIELDS
from engine.trace.screen import _FINISHED, LIST_LIMITS, VALUE_LISTS, DictColumns


class StepChunks:
    """Step columns gathered a few hundred steps at a time, right after those steps are parsed.

    Why: converting 200k parsed steps to columns after the fact touches every dict, list and number
    once more, long after they left the CPU cache; converting each small chunk while it is still
    cached costs a fraction of that. Per chunk: one itemgetter call per step yields all its fields,
    `zip` turns those rows into one tuple per field, and each kind of value (ints, floats, the flat
    list values, the list lengths) goes into one packed buffer with one `struct.pack` call.

    Only the common, clean shape is taken — every step has the writer's keys, no JSON boolean on its
    line, numbers of the right kind (`struct.pack` "q" refuses floats, strings, null and ints beyond
    int64; "d" anything but numbers and ints beyond a double), single-draft fields null — and then the
    values are exactly what `DictColumns` would give. `add` returns False on anything else (the object
    is then spent), and the caller screens the steps with `DictColumns`.

    `deep`: indices (into the added steps) whose nesting the columns do not bound — a non-empty
    policy_fields or keys beyond the writer's — so the reader must check their depth itself."""

    KEYS = (*DictColumns.CORE, *DictColumns.USUAL)
    INTS = (*INT_FIELDS, "window", "emitted", "chosen")
    FLOATS = (*TIME_FIELDS, "t_rule_ms")
    LISTS = (*LIST_LIMITS, *VALUE_LISTS)  # two of ints, four of numbers
    OTHER = ("correction", "bonus", "finished", "stop_reason", "policy_fields", "all_drafts", "decisions")

    def __init__(self) -> None:
        self.n = 0
        self._floats: tuple[str, ...] = ()
        self._get: Any = None
        # Per chunk of n steps, field-major blocks: ints (INTS × n), floats (floats × n), lens (6 × n),
        # correction / bonus (2 × n, null as 0) and their presence, `finished` present (n); and each list
        # field's values end to end.
        self._parts: dict[str, list[bytes]] = {k: [] for k in ("ints", "floats", "lens", "cb", "cb?", "finished?",
                                                                 *self.LISTS)}
        self._sizes: list[int] = []
        self.deep: list[int] = []

    def add(self, steps: list[dict]) -> bool:
        """Append a chunk of step dicts (whose lines hold no `true` / `false`); False if it does not fit."""
        n = len(steps)
        if not n:
            return True
        if self._get is None:  # older traces lack t_rule_ms: then no step may have it (or any other extra key)
            self._floats = self.FLOATS if "t_rule_ms" in steps[0] else TIME_FIELDS
            # With the parser's own key objects (orjson makes one str per key name and reuses it), each
            # lookup matches by identity instead of comparing characters: about half the gathering time.
            own = {k: k for k in steps[0]}
            self._get = itemgetter(*[own.get(k, k) for k in (*self.INTS, *self._floats, *self.LISTS, *self.OTHER)])
        ni, nf = len(self.INTS), len(self._floats)
        cat, put = chain.from_iterable, self._parts
        try:
            cols = list(zip(*map(self._get, steps)))  # one tuple per field
            ints, floats, lists = cols[:ni], cols[ni:ni + nf], cols[ni + nf:ni + nf + 6]
            cor, bon, fin, stop, pf, alt, dec = cols[ni + nf + 6:]
            if any(ints[-1]):
                return False  # `chosen` must be 0 on a single-draft step
            lens = list(map(len, cat(lists)))  # refuses numbers and null; strings and objects yield strings,
            if 0 in lens and set(map(type, cat(lists))) != {list}:  # which packing refuses, unless empty
                return False
            put["ints"].append(_pack(f"{ni * n}q", *cat(ints)))
            put["floats"].append(_pack(f"{nf * n}d", *cat(floats)))
            put["lens"].append(_pack(f"{6 * n}q", *lens))
            for j, (k, col) in enumerate(zip(self.LISTS, lists)):
                put[k].append(_pack(f"{sum(lens[j * n:(j + 1) * n])}{'q' if j < 2 else 'd'}", *cat(col)))
            cb = cor + bon
            put["cb?"].append(bytes(map(is_not, cb, repeat(None))))
            put["cb"].append(_pack(f"{2 * n}q", *map(_NULL_AS_0.get, cb, cb)))  # null as 0, the rest as is
            if not set(fin) <= _FINISHED:  # equal to None or one of the two strings: exactly those values
                return False
            put["finished?"].append(bytes(map(is_not, fin, repeat(None))))
            if set(map(type, stop)) != {str} or max(map(len, stop)) > 64 or set(map(type, pf)) != {dict} or \
                    alt.count(None) != n or dec.count(None) != n:
                return False
        except (KeyError, TypeError, OverflowError, struct.error):  # a missing key, a value of another kind
            return False
        full = len(self.KEYS) + 1 - (len(self.FLOATS) - len(self._floats))  # and "type"
        lengths = set(map(len, steps))
        if min(lengths) < full or (len(self._floats) < len(self.FLOATS) and max(lengths) > full):
            return False  # a key missing, or one beyond an older writer's (perhaps t_rule_ms): the dict screen
        if len(lengths) > 1 or any(pf):
            self.deep += [self.n + i for i, (s, p) in enumerate(zip(steps, pf)) if p or len(s) != full]
        self.n += n
        self._sizes.append(n)
        return True

    def columns(self) -> "_ChunkColumns":
        return _ChunkColumns(self)


_pack = struct.pack
_NULL_AS_0 = {None: 0}


class _ChunkColumns:
    """The `DictColumns` interface over StepChunks' arrays (every value already known to be clean)."""

    def __init__(self, ch: StepChunks) -> None:
        n = self.n = ch.n
        p = ch._parts
        # Step i of the whole trace sits in chunk c at position j; a chunk's field-major block of `width`
        # fields holds field f of that step at block offset f * size_c + j.
        size = np.asarray(ch._sizes)
        start = np.cumsum(size) - size
        per = np.repeat(size, size)
        j = np.arange(n) - np.repeat(start, size)

        def rows(k: str, dtype, width: int) -> list[np.ndarray]:
            flat = np.frombuffer(b"".join(p[k]), dtype)
            at = np.repeat(start * width, size) + j
            return [flat[at + f * per] for f in range(width)]

        self._a: dict[str, np.ndarray] = {}
        self._a.update(zip(StepChunks.INTS, rows("ints", np.int64, len(StepChunks.INTS))))
        self._a.update(zip(ch._floats, rows("floats", np.float64, len(ch._floats))))
        self._a.update((k + "#", v) for k, v in zip(StepChunks.LISTS, rows("lens", np.int64, 6)))
        for f, k in enumerate(StepChunks.LISTS):
            self._a[k] = np.frombuffer(b"".join(p[k]), np.int64 if f < 2 else np.float64)
        vals, present = rows("cb", np.int64, 2), rows("cb?", np.bool_, 2)  # null: absent, 0 in `vals`
        for f, k in enumerate(("correction", "bonus")):
            self._a[k], self._a[k + "?"] = vals[f], present[f]
        self._a["finished?"] = np.frombuffer(b"".join(p["finished?"]), np.bool_)

    def number(self, k: str, integer: bool, optional: bool, nullable: bool = True):
        if k not in self._a:  # t_rule_ms of an older trace: absent everywhere
            return np.zeros(self.n), np.zeros(self.n, bool), np.full(self.n, not optional)
        a = self._a[k].astype(np.int64 if integer else np.float64, copy=False)
        if k + "?" not in self._a:
            return a, np.ones(self.n, bool), np.zeros(self.n, bool)
        present = self._a[k + "?"]
        return a, present, ~present if not optional else np.zeros(self.n, bool)

    def lists(self, k: str, integer: bool):
        lens = self._a[k + "#"]
        return lens, self._a[k], np.repeat(np.arange(self.n), lens), np.zeros(self.n, bool)

    def rare(self) -> np.ndarray:
        return np.zeros(self.n, bool)

    def policy_fields_bad(self) -> np.ndarray:
        return np.zeros(self.n, bool)

    def finished(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(self.n, bool), ~self._a["finished?"]

    def stop_reason_bad(self) -> np.ndarray:
        return np.zeros(self.n, bool)
