"""engine/models/gguf_blocks.py: a GGUF's Q4_K, Q5_0 and Q8_0 tensors come back as their raw blocks by transformers
name with their format (what the quantized path reads as stored: tests/unit/kernels/test_q4k.py, test_q50_q80.py),
other tensors do not, a truncated file is refused, and the switch turns the source off."""

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


def _write_gguf(path, model, q4k: list[str], swap_rows: str | None = None, bits: dict[str, int] | None = None):
    """A GGUF holding `q4k` (transformers names) as Q4_K blocks of the model's weights (`bits`: a name's other
    format, qkernel.Q50, Q80 or Q6K), which are set to those blocks' values (so the file is the model's), and one F32
    tensor; `swap_rows`: a tensor written with two rows exchanged (a file that is not the model's)."""
    import gguf

    packs = {qkernel.Q4K: (qkernel.q4k_pack, gguf.GGMLQuantizationType.Q4_K),
             qkernel.Q50: (qkernel.q50_pack, gguf.GGMLQuantizationType.Q5_0),
             qkernel.Q80: (qkernel.q80_pack, gguf.GGMLQuantizationType.Q8_0),
             qkernel.Q6K: (qkernel.q6k_pack, gguf.GGMLQuantizationType.Q6_K)}
    wr = gguf.GGUFWriter(str(path), "qwen2")
    for hf in q4k:
        lin = model.get_submodule(hf.rsplit(".", 1)[0])
        code = (bits or {}).get(hf, qkernel.Q4K)
        pack, gtype = packs[code]
        blocks = pack(lin.weight.float())
        with torch.no_grad():
            lin.weight.copy_(qkernel.block_unpack(blocks, code).to(lin.weight.dtype))
        if hf == swap_rows:
            blocks = blocks[[1, 0] + list(range(2, blocks.shape[0]))]
        name = "output.weight" if hf == "lm_head.weight" else _gguf_name(hf)
        wr.add_tensor(name, blocks.numpy(), raw_shape=blocks.shape, raw_dtype=gguf.GGMLQuantizationType(gtype))
    wr.add_tensor("output_norm.weight", np.ones(256, dtype=np.float32))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def test_a_ggufs_q4k_tensors_come_back_as_their_blocks(tmp_path):
    from engine.models.gguf_blocks import GGUFBlocks

    model = _tiny_qwen()
    names = ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"]
    _write_gguf(tmp_path / "m.gguf", model, names)
    src = GGUFBlocks(tmp_path / "m.gguf")
    for hf in names:
        w = model.get_submodule(hf.rsplit(".", 1)[0]).weight
        b = src(hf)
        assert b.shape == (w.shape[0], w.shape[1] // 256 * 144)
        assert torch.equal(qkernel.q4k_unpack(b).to(w.dtype), w)
    assert src("model.norm.weight") is None and src("model.layers.0.self_attn.k_proj.weight") is None
    assert src.bits(names[0]) == qkernel.Q4K and src.bits("model.norm.weight") is None
    data = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:-1500])  # into the last Q4_K tensor
    with pytest.raises(ValueError, match="truncated"):
        GGUFBlocks(tmp_path / "cut.gguf")


def test_q5_0_and_q8_0_tensors_come_back_with_their_format(tmp_path):
    from engine.models.gguf_blocks import GGUFBlocks

    model = _tiny_qwen()
    fmt = {"model.layers.0.self_attn.k_proj.weight": qkernel.Q50, "model.layers.0.mlp.up_proj.weight": qkernel.Q50,
           "model.layers.1.mlp.down_proj.weight": qkernel.Q80}
    _write_gguf(tmp_path / "m.gguf", model, list(fmt), bits=fmt)
    src = GGUFBlocks(tmp_path / "m.gguf")
    for hf, code in fmt.items():
        w = model.get_submodule(hf.rsplit(".", 1)[0]).weight
        b = src(hf)
        assert src.bits(hf) == code and b.shape == (w.shape[0], w.shape[1] // 32 * qkernel.BLOCKS[code][2])
        assert torch.equal(qkernel.block_unpack(b, code).to(w.dtype), w)
    data = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:-1500])  # past the F32 tensor, into the Q8_0 one
    with pytest.raises(ValueError, match="Q8_0 shape.*truncated"):
        GGUFBlocks(tmp_path / "cut.gguf")



def test_gguf_source_follows_the_switch(monkeypatch, tmp_path):
    from engine.models import gguf_blocks, provision

    (tmp_path / "m.gguf").write_bytes(b"")
    monkeypatch.setattr(provision, "gguf_path", lambda spec: tmp_path / "m.gguf")  # as if `make models` kept it

    monkeypatch.setenv("SPECLAB_GGUF_BLOCKS", "0")
    assert gguf_blocks.gguf_source("qwen2.5-coder-1.5b") is None
    monkeypatch.setenv("SPECLAB_GGUF_BLOCKS", "1")
    assert gguf_blocks.gguf_source("not-a-model") is None
    calls = []
    monkeypatch.setattr(gguf_blocks, "GGUFBlocks", lambda p: calls.append(p) or "blocks")
    assert gguf_blocks.gguf_source("qwen2.5-coder-1.5b") == "blocks" and calls == [tmp_path / "m.gguf"]
    monkeypatch.setenv("SPECLAB_Q4K", "0")  # the switch's earlier name
    assert gguf_blocks.gguf_source("qwen2.5-coder-1.5b") is None and len(calls) == 1
