"""engine/models/gguf_blocks.py: a GGUF's Q4_K tensors come back as their raw blocks by transformers name (what
the quantized path reads as stored: tests/unit/kernels/test_q4k.py), other tensors do not, a truncated file is
refused, and the switch turns the source off."""

import numpy as np
import pytest
import torch

from engine.kernels import qkernel


def _tiny_qwen():
    import transformers

    cfg = transformers.Qwen2Config(vocab_size=96, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval()


def _gguf_name(hf: str) -> str:
    from engine.models.gguf_types import _BLOCK

    _, _, i, mod, proj, _ = hf.split(".")
    return f"blk.{i}.{next(k for k, v in _BLOCK.items() if v == mod + '.' + proj)}.weight"


def _write_gguf(path, model, q4k: list[str], swap_rows: str | None = None):
    """A GGUF holding `q4k` (transformers names) as Q4_K blocks of the model's weights, which are set to those
    blocks' values (so the file is the model's), and one F32 tensor; `swap_rows`: a tensor written with two rows
    exchanged (a file that is not the model's)."""
    import gguf

    wr = gguf.GGUFWriter(str(path), "qwen2")
    for hf in q4k:
        lin = model.get_submodule(hf.rsplit(".", 1)[0])
        blocks = qkernel.q4k_pack(lin.weight.float())
        with torch.no_grad():
            lin.weight.copy_(qkernel.q4k_unpack(blocks).to(lin.weight.dtype))
        if hf == swap_rows:
            blocks = blocks[[1, 0] + list(range(2, blocks.shape[0]))]
        wr.add_tensor(_gguf_name(hf), blocks.numpy(), raw_shape=blocks.shape, raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    wr.add_tensor("output_norm.weight", np.ones(256, dtype=np.float32))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def test_a_ggufs_q4k_tensors_come_back_as_their_blocks(tmp_path):
    from engine.models.gguf_blocks import Q4KBlocks

    model = _tiny_qwen()
    names = ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"]
    _write_gguf(tmp_path / "m.gguf", model, names)
    src = Q4KBlocks(tmp_path / "m.gguf")
    for hf in names:
        w = model.get_submodule(hf.rsplit(".", 1)[0]).weight
        b = src(hf)
        assert b.shape == (w.shape[0], w.shape[1] // 256 * 144)
        assert torch.equal(qkernel.q4k_unpack(b).to(w.dtype), w)
    assert src("model.norm.weight") is None and src("model.layers.0.self_attn.k_proj.weight") is None
    data = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:-1500])  # into the last Q4_K tensor
    with pytest.raises(ValueError, match="truncated"):
        Q4KBlocks(tmp_path / "cut.gguf")



def test_q4k_source_follows_the_switch(monkeypatch):
    from engine.models import gguf_blocks

    monkeypatch.setenv("SPECLAB_Q4K", "0")
    assert gguf_blocks.q4k_source("qwen2.5-coder-1.5b") is None
    monkeypatch.setenv("SPECLAB_Q4K", "1")
    assert gguf_blocks.q4k_source("not-a-model") is None
