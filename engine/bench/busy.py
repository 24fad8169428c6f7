"""Was another process holding a core while we measured? Two samples of the kernel's CPU counters,
one before and one after a run, say so after the fact.

    s0 = sample(); …run…; report = busy_between(s0, sample())

From /proc/stat's aggregate `cpu` line (jiffies since boot: user nice system idle iowait irq softirq
steal …) and /proc/<pid>/stat's utime + stime + cutime + cstime for this process and every process below it
(its own jiffies, all threads, with those of the children it started: a peer engine's server, vLLM's engine
core — reaped children are in cutime + cstime, live ones are read where they run):

    busy     = Δ(total − idle − iowait)            jiffies any process kept a core busy
    own      = Δ(Σ over our process tree of utime + stime + cutime + cstime)
    others   = max(0, busy − own) ÷ (Δt · HZ)      cores held by other processes on average
    busy flag: others ≥ OTHERS_LIMIT (half a core)

Worked example: 10 s on 2 cores at HZ = 100 → 2,000 jiffies in all; busy grew by 1,900 of which 950
were ours → others = 950 ÷ 1,000 = 0.95 cores: a training job held one of the two cores, flagged.
With busy 980 and own 950 → others = 0.03 cores: a quiet machine.

Why counters, not the load average alone: the 1-minute load average lags a minute and counts our own
threads; the counters split ours from the others' exactly over the run's own interval. The load
average is recorded too, as a second witness. Why the whole tree: a peers run's llama-server worked
0.75 cores of a quiet machine and the run was flagged busy when only our own process tree counted.
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
    own: int  # jiffies of this process and the processes below it (utime + stime + cutime + cstime)
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
                                       "(/proc/stat busy jiffies − those of this process and its children, over the run)"}

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


def parse_tree_stat(text: str) -> tuple[int, int]:
    """(parent pid, utime + stime + cutime + cstime) from /proc/<pid>/stat (fields 4 and 14–17)."""
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[1]), sum(int(x) for x in rest[11:15])


def tree_jiffies(stats: dict[int, str], root: int) -> int:
    """Jiffies of `root` and every process below it, from {pid: /proc/<pid>/stat text} (a stat that does not
    parse is a process that exited while we read: left out)."""
    parent, own = {}, {}
    for pid, text in stats.items():
        try:
            parent[pid], own[pid] = parse_tree_stat(text)
        except (ValueError, IndexError):
            continue
    children: dict[int, list[int]] = {}
    for pid, pp in parent.items():
        children.setdefault(pp, []).append(pid)
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += own.get(pid, 0)
        todo += children.get(pid, [])
    return total


def _process_stats() -> dict[int, str]:
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            text = _read(f"/proc/{entry.name}/stat")
            if text is not None:
                out[int(entry.name)] = text
    return out


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except OSError:
        return None


def sample() -> CpuSample | None:
    """Now's counters, or None where /proc is missing (not Linux): nothing can be said then."""
    stat = _read("/proc/stat")
    if stat is None or _read("/proc/self/stat") is None:
        return None
    busy, total = parse_stat(stat)
    la = _read("/proc/loadavg")
    own = tree_jiffies(_process_stats(), os.getpid())
    return CpuSample(time.monotonic(), busy, total, own, float(la.split()[0]) if la else None)


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
