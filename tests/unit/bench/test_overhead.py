"""The overhead probe: shares add up, our C kernels' own time is counted, the model and libraries are left as they were."""

import pytest
import torch

from engine.bench.overhead import _kernel_clock, format_overhead, measure
from engine.kernels import dense_kernel, qkernel
from engine.core.lm import HFModel
from engine.kernels.accelerate import accelerate
from tests.conftest import tiny_llama


@pytest.mark.parametrize("weights,kernel", [("dense", "auto"), ("int8", "torch"), pytest.param("int4", "auto",
                         marks=pytest.mark.skipif(qkernel.available() is not None, reason="no qgemm kernel here"))])
def test_shares_add_up_and_the_model_is_restored(weights, kernel):
    m = tiny_llama(0).to(torch.bfloat16)
    accelerate(m, weights, act_dtype=torch.bfloat16, kernel=kernel)  # what model loading runs
    lm = HFModel(m, "tiny")
    before = lm.extend([1, 2, 3])[-1].clone()
    r = measure(lm, list(range(1, 20)), steps=3, repeats=2)
    assert 0 <= r["overhead_share"] <= 1 and abs(r["kernel_share"] + r["overhead_share"] - 1) < 1e-9
    assert r["step_ms"] > 0 and r["top_ms_per_step"] and r["weights"] == weights
    if kernel == "auto" and (weights != "dense" or dense_kernel.available() is None):
        assert "speclab C kernels" in r["top_ms_per_step"]  # the C layer's calls (fused_layer.h) are clocked too
    assert all("forward" not in mod.__dict__ for mod in m.modules() if isinstance(mod, qkernel.QGemmLinear))
    lm.reset()
    torch.testing.assert_close(lm.extend([1, 2, 3])[-1], before)
    assert "| " + weights + " |" in format_overhead([r])


@pytest.mark.skipif(dense_kernel.available() is not None, reason="no dense bf16 kernel on this CPU")
def test_the_dense_kernels_calls_count_as_kernel_time_and_the_library_comes_back():
    """A dense bf16 step spends most of its time in our GEMV, called through ctypes: the profiler alone saw
    7 % kernel time in a 200 ms step of the 1.5B target."""
    lib = dense_kernel._lib
    x, w = torch.randn(4, 64, dtype=torch.bfloat16), torch.randn(256, 64, dtype=torch.bfloat16)
    spent, restore = _kernel_clock()
    try:
        y = dense_kernel.bgemv(x, w)
    finally:
        for mod, orig in restore:
            mod._lib = orig
    assert spent[0] > 0 and dense_kernel._lib is lib
    torch.testing.assert_close(y.float(), (x.float() @ w.float().T), rtol=2e-2, atol=2e-2)


def test_busy_rows_time_beside_a_hog_at_both_thread_counts_and_restore_the_threads():
    from contextlib import nullcontext

    m = tiny_llama(0)
    lm = HFModel(m, "tiny")
    before = torch.get_num_threads()
    rows = measure(lm, list(range(1, 20)), steps=2, repeats=1)
    from engine.bench.overhead import busy_rows

    busy = busy_rows(lm, list(range(1, 20)), 2, 1, before, rows["step_ms"], hog=nullcontext, choose=lambda n: 1)
    conds = [(r["condition"], r["threads"]) for r in busy]
    assert conds[0] == ("busy", before) and (before == 1 or conds[1] == ("busy, threads chosen", 1))
    assert all(r["vs_quiet"] > 0 for r in busy) and torch.get_num_threads() == before
    assert "busy, threads chosen" in format_overhead(busy) or before == 1


def test_choose_threads_leaves_the_held_core():
    from engine.bench.cores import choose_threads

    held = {"ok": False, "busy": {"cpu1": 0.97}, "shares": {"cpu0": 0.03, "cpu1": 0.97}}
    assert choose_threads(2, lambda: held) == 1
    assert choose_threads(2, lambda: {"ok": True, "busy": {}, "shares": {"cpu0": 0.0, "cpu1": 0.1}}) == 2
    assert choose_threads(2, lambda: {"ok": None, "error": "x"}) == 2
    assert choose_threads(4, lambda: {"ok": False, "busy": {"cpu0": 1, "cpu1": 1}, "shares": {"cpu0": 1, "cpu1": 1}}) == 1
