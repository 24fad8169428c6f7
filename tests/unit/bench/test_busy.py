"""engine.bench.busy: another process's share of the cores from two /proc samples."""

from __future__ import annotations

import pytest

from engine.bench import busy
import os
import subprocess
import sys
import time

from engine.bench.busy import CpuSample, busy_between, parse_stat, parse_tree_stat, tree_jiffies

STAT = """cpu  100 5 50 800 20 3 2 0 0 0
cpu0 50 2 25 400 10 1 1 0 0 0
cpu1 50 3 25 400 10 2 1 0 0 0
intr 12345
"""


def test_parse_stat_reads_the_aggregate_line():
    busy_j, total = parse_stat(STAT)
    assert total == 100 + 5 + 50 + 800 + 20 + 3 + 2 + 0
    assert busy_j == total - 800 - 20  # idle and iowait are not busy
    with pytest.raises(ValueError, match="no aggregate"):
        parse_stat("cpu0 1 2 3 4\n")


def test_parse_tree_stat_reads_the_parent_and_all_four_times_past_a_name_with_spaces():
    text = "4242 (python -m engine) R 1 4242 4242 0 -1 4194304 100 0 0 0 731 119 40 2 20 0 3 0 1000 0 0"
    assert parse_tree_stat(text) == (1, 731 + 119 + 40 + 2)


def _stat(pid, ppid, u, s=0, cu=0, cs=0):
    return f"{pid} (p {pid}) S {ppid} {pid} {pid} 0 -1 0 0 0 0 0 {u} {s} {cu} {cs} 20 0 1 0 0 0 0"


def test_the_tree_counts_children_and_grandchildren_and_nothing_beside_it():
    stats = {1: _stat(1, 0, 5000), 10: _stat(10, 1, 100, 10, 30, 3),  # us: our reaped children in cu + cs
             11: _stat(11, 10, 400, 40), 12: _stat(12, 11, 7), 20: _stat(20, 1, 900), 21: "21 (gone"}
    assert tree_jiffies(stats, 10) == 143 + 440 + 7  # 20 (another process) and 1 (our parent) are not ours
    assert tree_jiffies(stats, 99) == 0


def test_the_worked_example_flags_a_core_held_by_another_process():
    a = CpuSample(t=0.0, busy=0, total=0, own=0, loadavg=1.0)
    b = CpuSample(t=10.0, busy=1900, total=2000, own=950, loadavg=2.0)
    r = busy_between(a, b, hz=100, cores=2)
    assert r.others_cores == pytest.approx(0.95) and r.own_cores == pytest.approx(0.95) and r.busy
    assert r.loadavg_before == 1.0 and r.loadavg_after == 2.0 and "BUSY" in r.line()
    quiet = busy_between(a, CpuSample(10.0, 980, 2000, 950, 1.0), hz=100, cores=2)
    assert quiet.others_cores == pytest.approx(0.03) and not quiet.busy and "quiet" in quiet.line()
    assert quiet.to_dict()["busy"] is False and "rule" in quiet.to_dict()


def test_our_own_time_is_never_counted_as_others_and_missing_samples_say_nothing():
    a = CpuSample(0.0, 0, 0, 0, None)
    mine = busy_between(a, CpuSample(1.0, 100, 200, 120, None), hz=100, cores=2)  # own > busy: clock skew
    assert mine.others_cores == 0.0 and not mine.busy
    assert busy_between(None, a) is None and busy_between(a, a) is None


def test_a_real_sample_pair_on_this_machine():
    a = busy.sample()
    if a is None:
        pytest.skip("no /proc here")
    sum(i * i for i in range(200_000))  # a little of our own work
    b = busy.sample()
    b = CpuSample(a.t + max(b.t - a.t, 1e-3), b.busy, b.total, b.own, b.loadavg)
    r = busy_between(a, b)
    assert r is not None and r.others_cores >= 0 and r.own_cores >= 0 and r.cores >= 1


def test_a_child_working_a_core_is_ours_not_anothers():
    """A peers run's servers are our children: a child spinning for a second must not flag the machine busy."""
    a = busy.sample()
    if a is None:
        pytest.skip("no /proc here")
    child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.0: pass"])
    time.sleep(0.6)
    mid = busy.sample()  # the child alive: read where it runs
    child.wait()
    b = busy.sample()  # the child reaped: in our cutime
    assert mid.own - a.own >= 0.3 * os.sysconf("SC_CLK_TCK")
    assert b.own - a.own >= 0.8 * os.sysconf("SC_CLK_TCK") and b.own >= mid.own
