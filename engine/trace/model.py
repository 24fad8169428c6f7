"""A loaded trace in memory: the header, the requests, the steps, the request ends and the footer of
one run (trace format v1; docs/trace-format.md), as the loader (engine/trace/read.py) returns them.

Kept apart from the writer and the loader so that everything that builds or reads a Trace (the
record assembly, the JSONL and Parquet readers, importers, the app) depends on this one small module
and on nothing above it: the trace package has no import cycle, not even a deferred one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable

from engine.metrics import summarize_steps

Progress = Callable[[float, str], None]  # (fraction done, what is happening)


@dataclass
class Trace:
    header: dict[str, Any]
    requests: dict[int, dict[str, Any]] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    ends: dict[int, dict[str, Any]] = field(default_factory=dict)
    footer: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    source: str = ""

    # The loader's summary (from the columns it screened), kept with the step list and counts it was
    # computed for: pages ask for a trace's summary on every load, and a 200k-step trace has one.
    _summary: tuple[tuple, dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    @property
    def complete(self) -> bool:
        return self.footer is not None

    @property
    def summary(self) -> dict[str, Any]:
        key = (id(self.steps), len(self.steps), len(self.ends))
        if self._summary is None or self._summary[0] != key:
            self._summary = (key, summarize_steps(self.steps, len(self.ends)))
        return copy.deepcopy(self._summary[1])
