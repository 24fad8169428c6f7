"""The import benchmark's two cases at a small size: a real-shape vLLM file imported, an over-limit claim refused."""

from engine.interop.importbench import lines, run


def test_small_run_imports_and_refuses():
    res = run(requests=20, steps=8, K=2)
    assert res["import"]["error"] is None and res["import"]["steps"] >= 20 * 8
    assert res["over_limit_claim"]["error"]  # the 2²⁴-token claim is refused, not built
    assert len(lines(res)) == 3
