"""Was another process holding a core while we measured? Two samples of the kernel's CPU counters,
one before and one after a run, say so after the fact.

    s0 = sample(); …run…; report = busy_between(s0, sample())

From /proc/stat's aggregate `cpu` line (jiffies since boot: user nice system idle iowait irq softirq
steal …) and /proc/self/stat's utime + stime (this process's own jiffies, all its threads):

    busy     = Δ(total − idle − iowait)            jiffies any process kept a core busy
    own      = Δ(utime + stime)                    jiffies of this process
    others   = max(0, busy − own) ÷ (Δt · HZ)      cores held by other processes on average
    busy flag: others ≥ OTHERS_LIMIT (half a core)

Worked example: 10 s on 2 cores at HZ = 100 → 2,000 jiffies in all; busy grew by 1,900 of which 950
were ours → others = 950 ÷ 1,000 = 0.95 cores: a training job held one of the two cores, flagged.
With busy 980 and own 950 → others = 0.03 cores: a quiet machine.

Why counters, not the load average alone: the 1-minute load average lags a minute and counts our own
threads; the counters split ours from the others' exactly over the run's own interval. The load
average is recorded too, as a second witness. Child processes (a peer engine's server) are not ours
by this count: in a peers run their cores show as others'.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

OTHERS_LIMIT = 0.5  # cores held by others on average: half a core of two is a machine the figures cannot trust


@dataclass(frozen=True)
class CpuSample:
    t: float  # time.monotonic() seconds
    busy: int  # jiffies all cores were busy since boot (total − idle − iowait)
    total: int  # all jiffies since boot, every core
    own: int  # this process's utime + stime jiffies
    loadavg: float | None  # 1-minute load average (None where /proc/loadavg is missing)


@dataclass(frozen=True)
class BusyReport:
    others_cores: float  # mean cores other processes held over the interval
    own_cores: float  # mean cores this process used
    seconds: float
    cores: int
    busy: bool  # others_cores ≥ OTHERS_LIMIT
    loadavg_before: float | None
    loadavg_after: float | None

    def to_dict(self) -> dict:
        return asdict(self) | {"rule": f"busy when other processes held ≥ {OTHERS_LIMIT} cores on average "
                                       "(/proc/stat busy jiffies − this process's, over the run)"}

    def line(self) -> str:
        state = "BUSY: another process held a core" if self.busy else "quiet"
        return (f"machine {state} — others {self.others_cores:.2f} cores, ours {self.own_cores:.2f}, of "
                f"{self.cores}, over {self.seconds:.1f} s")


def parse_stat(text: str) -> tuple[int, int]:
    """(busy, total) jiffies from /proc/stat's text: its first `cpu ` line (all cores)."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]]
            idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
            total = sum(v[:8])  # guest / guest_nice are already inside user / nice
            return total - idle, total
    raise ValueError("/proc/stat has no aggregate 'cpu' line")


def parse_self_stat(text: str) -> int:
    """utime + stime jiffies from /proc/<pid>/stat (fields 14 and 15; the name in parentheses may hold spaces)."""
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[11]) + int(rest[12])  # fields 14, 15 counted from 1, the first two (pid, name) cut off


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError:
        return None


def sample() -> CpuSample | None:
    """Now's counters, or None where /proc is missing (not Linux): nothing can be said then."""
    stat, own = _read("/proc/stat"), _read("/proc/self/stat")
    if stat is None or own is None:
        return None
    busy, total = parse_stat(stat)
    la = _read("/proc/loadavg")
    return CpuSample(time.monotonic(), busy, total, parse_self_stat(own), float(la.split()[0]) if la else None)


def busy_between(a: CpuSample | None, b: CpuSample | None, hz: int | None = None,
                 cores: int | None = None) -> BusyReport | None:
    """The report over [a, b] (None when either sample is missing or no time passed)."""
    if a is None or b is None or b.t <= a.t:
        return None
    hz = hz or os.sysconf("SC_CLK_TCK")
    cores = cores or os.cpu_count() or 1
    dt = b.t - a.t
    own = max(0, b.own - a.own)
    others = max(0, (b.busy - a.busy) - own) / (dt * hz)
    return BusyReport(others, own / (dt * hz), dt, cores, others >= OTHERS_LIMIT, a.loadavg, b.loadavg)
