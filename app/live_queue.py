"""Live page: one first-come first-served line for the models, shared by every browser session.

Why a queue: `st.cache_resource` hands the same model objects to every browser session, and the KV
caches live inside the LM wrappers. Two sessions decoding at once would interleave cache updates
and silently corrupt both outputs (and on a CPU they would only slow each other down). So one
`ModelQueue`, shared by every session and every pair, lets one run at a time hold the models, in the
order the Decode buttons were pressed (a ticket is taken in the button's callback, the earliest
point of the script run), and tells the waiting sessions where they are in line.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Callable

import streamlit as st

class ModelQueue:
    """First-come first-served access to the models, shared by every session.

    `take()` hands out a ticket (call it as early as possible: in the Decode button's callback);
    `wait(ticket, …)` blocks until every earlier ticket is released, reporting the position in line
    (1 = next) to `on_wait` about twice a second; `release(ticket)` gives the models up (or leaves
    the line). A ticket whose thread died without releasing it (a session that went away) is dropped,
    so a lost tab cannot block everyone behind it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._line: list[tuple[int, threading.Thread]] = []
        self._numbers = itertools.count(1)

    def take(self) -> int:
        with self._cond:
            n = next(self._numbers)
            self._line.append((n, threading.current_thread()))
            return n

    def _ahead(self, ticket: int) -> int:
        self._line = [(n, t) for n, t in self._line if t.is_alive() or n == ticket]
        return next((i for i, (n, _) in enumerate(self._line) if n == ticket), -1)

    def position(self, ticket: int) -> int:
        """How many tickets are ahead of this one (0: it holds the models or is next)."""
        with self._cond:
            return self._ahead(ticket)

    def wait(self, ticket: int, timeout: float, on_wait: Callable[[int], None] | None = None) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                ahead = self._ahead(ticket)
                if ahead < 0:
                    raise RuntimeError(f"ticket {ticket} is not in line")
                if ahead == 0:
                    return True
            if time.monotonic() >= deadline:
                return False
            if on_wait is not None:
                on_wait(ahead)  # outside the lock: a Streamlit call here may stop this script run
            with self._cond:
                if self._ahead(ticket) > 0:
                    self._cond.wait(max(0.01, min(0.5, deadline - time.monotonic())))

    def release(self, ticket: int) -> None:
        with self._cond:
            self._line = [(n, t) for n, t in self._line if n != ticket]
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._line)


@st.cache_resource
def model_queue() -> ModelQueue:
    """The one queue of this server process (all pairs: they share the CPU/GPU and its memory)."""
    return ModelQueue()
