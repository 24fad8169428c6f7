"""Is any core busy before a timing starts? `busy_cores` samples /proc/stat twice and reports each
core's busy share over the interval:

    busy(core) = Δ(user + nice + system + irq + softirq + steal) ÷ Δ(all fields)

A core above `threshold` (default 0.5) is held by some other process. Why it matters: llama.cpp's
threads wait on each other by spinning, so on a 2-core machine where another process holds one core
its 2-thread generation collapses (0.4–0.55 tokens/s against 8.2 with 1 thread, issue 48), while
engines that block instead of spinning lose only their share. A comparison timed on a busy machine
says so in its result (`engine.bench.peers.run_peers` records this check).

Example: {"ok": False, "busy": {"cpu1": 0.97}, "shares": {"cpu0": 0.03, "cpu1": 0.97}, "interval_s": 0.5,
          "threshold": 0.5}
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

BUSY = (1, 2, 3, 6, 7, 8)  # user nice system irq softirq steal (idle = 4, iowait = 5)


def read_stat(text: str) -> dict[str, list[int]]:
    """Per-core jiffies from /proc/stat text: {'cpu0': [user, nice, system, idle, iowait, irq, softirq, steal, …]}."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("cpu") and parts[0] != "cpu":
            out[parts[0]] = [int(x) for x in parts[1:]]
    return out


def shares(before: dict[str, list[int]], after: dict[str, list[int]]) -> dict[str, float]:
    """Busy share of each core between two readings (cores missing from either are left out)."""
    out = {}
    for core, b in before.items():
        a = after.get(core)
        if a is None:
            continue
        d = [x - y for x, y in zip(a, b)]
        total = sum(d)
        busy = sum(d[i - 1] for i in BUSY if i - 1 < len(d))
        out[core] = busy / total if total > 0 else 0.0
    return out


def busy_cores(interval_s: float = 0.5, threshold: float = 0.5,
               read: Callable[[], str] = lambda: Path("/proc/stat").read_text(),
               sleep: Callable[[float], None] = time.sleep) -> dict:
    """The check (module docstring); {'ok': None, 'error': …} where /proc/stat cannot be read."""
    try:
        first = read_stat(read())
        sleep(interval_s)
        second = read_stat(read())
    except OSError as e:
        return {"ok": None, "error": f"cannot read /proc/stat: {e}", "threshold": threshold}
    s = shares(first, second)
    busy = {k: round(v, 3) for k, v in s.items() if v > threshold}
    return {"ok": not busy, "busy": busy, "shares": {k: round(v, 3) for k, v in s.items()},
            "interval_s": interval_s, "threshold": threshold}


def choose_threads(most: int, check: Callable[[], dict] | None = None) -> int:
    """The threads a run should take: the cores no other process holds, at most `most`, at least one.

    Why: a thread pool that waits on each other (OpenMP, llama.cpp's spinning workers) runs only as fast as
    its slowest thread, so a thread placed on a core another process holds stalls every step; one thread
    fewer loses a share, not the run. Example: 2 cores, one held → 1; the check failing → `most`."""
    r = (check or busy_cores)()
    if r.get("ok") is None:
        return max(1, most)
    free = len(r["shares"]) - len(r["busy"])
    return max(1, min(most, free))


class Hog:
    """Another process holding one core for the length of a `with` block (a Python busy loop, at the caller's
    priority): the busy machine of a timing that asks how a path fares beside other work."""

    def __enter__(self) -> "Hog":
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.3)  # let it reach its loop before anything is timed
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()
