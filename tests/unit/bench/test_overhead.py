"""The overhead probe: shares add up, the qgemm kernels' own time is counted, the model is left as it was."""

import pytest
import torch

from engine.bench.overhead import format_overhead, measure
from engine.kernels import qkernel
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
    if kernel == "auto" and weights != "dense":
        assert "qgemm (ctypes)" in r["top_ms_per_step"]
    assert all("forward" not in mod.__dict__ for mod in m.modules() if isinstance(mod, qkernel.QGemmLinear))
    lm.reset()
    torch.testing.assert_close(lm.extend([1, 2, 3])[-1], before)
    assert "| " + weights + " |" in format_overhead([r])
