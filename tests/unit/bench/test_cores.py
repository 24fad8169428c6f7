"""The busy-core check before a timing: per-core shares from two /proc/stat readings."""

from engine.bench.cores import busy_cores, read_stat, shares

A = "cpu  10 0 10 80 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0\ncpu1 5 0 5 40 0 0 0 0\nintr 1\n"
B = "cpu  10 0 10 80 0 0 0 0\ncpu0 6 0 5 139 0 0 0 0\ncpu1 95 0 5 50 0 0 0 0\n"


def test_shares_and_the_verdict():
    assert set(read_stat(A)) == {"cpu0", "cpu1"}
    s = shares(read_stat(A), read_stat(B))
    assert round(s["cpu0"], 2) == 0.01 and round(s["cpu1"], 2) == 0.9
    texts = iter([A, B])
    r = busy_cores(0.0, 0.5, read=lambda: next(texts), sleep=lambda s: None)
    assert r["ok"] is False and list(r["busy"]) == ["cpu1"]


def test_unreadable_stat_is_unknown_not_a_crash():
    def boom():
        raise OSError("no /proc")

    assert busy_cores(read=boom, sleep=lambda s: None)["ok"] is None


def test_the_hog_runs_inside_its_block_and_is_gone_after():
    from engine.bench.cores import Hog

    with Hog() as h:
        assert h.proc.poll() is None  # spinning
    assert h.proc.poll() is not None
