"""engine.kernels.accelerate: the one switch onto the fast paths — per model, called by model loading, with a
report of the path taken and why; nothing else in the engine switches a kernel on."""

import ast

import pytest
import torch

from engine.kernels import dense_kernel, qkernel, rope_table
from engine.kernels.accelerate import KernelReport, accelerate, paths, status
from engine.core.lm import HFModel
from engine.kernels.rowwise_attention import NAME
from tests.conftest import REPO, tiny_llama

# The functions that route a model's forwards onto other code, and the only modules that may call them:
# accelerate (the switch) and fast_layer (whose use_dense_kernel composes the bf16 path's three parts).
SWITCHES = {"use_skinny_linears", "use_dense_kernel", "use_fast_layers", "use_rowwise", "quantize_model",
            "use_rope_table"}
MAY_SWITCH = {"engine/kernels/accelerate.py", "engine/kernels/fast_layer.py"}


def test_fp32_runs_torch_weight_major_and_the_wrapper_patches_nothing():
    m = tiny_llama(0)
    HFModel(m)  # the wrapper drives what it is handed
    assert not any("forward" in mod.__dict__ for mod in m.modules())
    r = accelerate(m)
    n = sum(isinstance(mod, torch.nn.Linear) for mod in m.modules())
    assert r.path.startswith("torch fp32") and r.layers == n and r.build is None
    assert sum("forward" in mod.__dict__ for mod in m.modules()) == n + 1  # the linears and the rope (its table)
    assert m.model.rotary_emb.forward.__func__ is rope_table._forward
    assert "\n" not in r.summary() and "weights dense on cpu fp32" in r.summary()


def test_bf16_dense_takes_our_kernel_where_it_runs_else_says_why():
    m = tiny_llama(0).to(torch.bfloat16)
    r = accelerate(m)
    if dense_kernel.available() is None:
        assert r.path == "speclab bgemv" and r.layers > 0 and r.build in ("installed", "cache")
        assert m.config._attn_implementation == NAME
    else:
        assert r.path == "torch bf16" and r.why == dense_kernel.available() and r.layers == 0


def test_quantized_switches_attention_only_with_our_batch_invariant_kernel():
    m = tiny_llama(0).to(torch.bfloat16)
    r = accelerate(m, "int8", act_dtype=torch.bfloat16, kernel="torch")
    assert r.path == "torch int4/int8" and r.why == "kernel='torch' asked" and r.quant.weights == "int8"
    assert m.config._attn_implementation != NAME
    if qkernel.available() is None:
        m = tiny_llama(0).to(torch.bfloat16)
        r = accelerate(m, "int4", act_dtype=torch.bfloat16)
        assert r.path == f"speclab qgemm ({qkernel.variant()})" and m.config._attn_implementation == NAME


def test_refusals_are_one_line():
    with pytest.raises(ValueError, match="unknown weights path"):
        accelerate(tiny_llama(0), "int3")


def test_paths_and_status_name_every_build_and_path():
    assert paths("dense", torch.float32)[0].startswith("torch fp32")
    assert paths("dense", torch.bfloat16, "cuda") == ("torch", "cuda: torch's own kernels")
    text = "\n".join(status())
    for build in ("qgemm-avx512vnni", "qgemm-avx2", "bgemv"):
        assert build in text
    assert "OpenMP runtimes mapped" in text and "quantized" in text


def test_model_loading_calls_it_once_per_model(tmp_path, monkeypatch):
    from engine.kernels import accelerate as acc
    from engine.models.load import load_model

    tiny_llama(0).save_pretrained(tmp_path)
    seen, real = [], acc.accelerate

    def counted(model, weights="dense", *args, **kwargs):
        seen.append(weights)
        return real(model, weights, *args, **kwargs)

    monkeypatch.setattr(acc, "accelerate", counted)
    loaded = load_model(str(tmp_path), "fp32", "cpu")
    assert seen == ["dense"] and isinstance(loaded.kernels, KernelReport)
    assert loaded.kernels.path.startswith("torch fp32")


def _calls(path):
    tree = ast.parse(path.read_text())
    return {n.func.id if isinstance(n.func, ast.Name) else n.func.attr for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))}


def test_no_kernel_switch_outside_accelerate():
    """0 monkey-patch sites outside the one switch: no engine or app module but accelerate (and fast_layer's
    own composition) calls a function that reroutes a model's forwards."""
    found = {str(p.relative_to(REPO)): sorted(_calls(p) & SWITCHES)
             for d in ("engine", "app") for p in (REPO / d).rglob("*.py")}
    stray = {f: s for f, s in found.items() if s and f not in MAY_SWITCH}
    assert not stray, stray
    assert found["engine/kernels/accelerate.py"]  # the check sees calls at all


def test_auto_loads_a_quantized_model_in_bf16_where_our_kernel_takes_it(tmp_path, monkeypatch):
    """On a CPU without native bf16 `--dtype auto` is float32, except for a model on our qgemm kernel (it takes
    bf16 activations); a draft beside a float32 target (a mixed pair) keeps float32."""
    from engine.kernels import qkernel
    from engine.models import load as load_mod

    monkeypatch.setattr(load_mod, "native_bf16", lambda *a, **k: False)  # an AVX2-only CPU, whatever runs this
    tiny_llama(0).save_pretrained(tmp_path)
    dense = load_mod.load_model(str(tmp_path), "auto", "cpu")
    assert dense.lm.dtype == torch.float32
    quant = load_mod.load_model(str(tmp_path), "auto", "cpu", weights="int4")
    assert quant.lm.dtype == (torch.bfloat16 if qkernel.available() is None else torch.float32)
    draft = load_mod.load_model(str(tmp_path), "auto", "cpu", role="draft", target=dense, weights="int4")
    assert draft.lm.dtype == torch.float32
    assert load_mod.load_model(str(tmp_path), "fp32", "cpu", weights="int4").lm.dtype == torch.float32  # asked


def test_the_report_says_what_a_step_runs_in_one_call():
    from engine.kernels.fast_decoder import one_call
    from tests.unit.kernels.test_fused import _wide

    if dense_kernel.available() is not None:
        pytest.skip(f"dense kernel: {dense_kernel.available()}")
    m = _wide("llama")
    r = accelerate(m)
    assert one_call(m) == "layers, final norm and head"
    assert r.why.endswith("; a decode step's layers, final norm and head in one C call")
    tiny = tiny_llama(0).to(torch.bfloat16)  # too narrow for the one-call layer: the report says nothing of it
    assert one_call(tiny) == "" and "one C call" not in accelerate(tiny).why
