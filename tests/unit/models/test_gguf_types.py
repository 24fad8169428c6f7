"""The committed GGUF tensor types (the plan of --weights quantized): name map, pinned records, refusals."""

import json

import pytest

from engine.models import gguf_types
from engine.models.gguf_types import hf_name, types_for
from engine.models.provision import MODELS, gguf_path


def test_llama_cpp_names_map_to_transformers_names():
    assert hf_name("blk.0.attn_q.weight") == "model.layers.0.self_attn.q_proj.weight"
    assert hf_name("blk.27.ffn_down.weight") == "model.layers.27.mlp.down_proj.weight"
    assert hf_name("blk.3.attn_v.bias") == "model.layers.3.self_attn.v_proj.bias"
    assert hf_name("output.weight") == "lm_head.weight" and hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("rope_freqs.weight") is None and hf_name("blk.0.unknown.weight") is None


@pytest.mark.parametrize("name", ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"])
def test_the_committed_records_cover_every_linear_of_the_pinned_models(name):
    t = types_for(name)
    layers = 28 if "1.5b" in name else 24
    for i in range(layers):
        for proj in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                     "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            assert f"model.layers.{i}.{proj}.weight" in t
    assert "lm_head.weight" in t
    assert types_for("smollm2-135m") is None  # not from a GGUF: the plan falls back to int8


def test_a_record_of_another_file_is_refused(tmp_path, monkeypatch):
    src = gguf_types.types_path("qwen2.5-coder-1.5b")
    rec = json.loads(src.read_text())
    rec["gguf_sha256"] = "0" * 64
    monkeypatch.setattr(gguf_types, "TYPES_DIR", tmp_path)
    (tmp_path / src.name).write_text(json.dumps(rec))
    with pytest.raises(ValueError, match=r"describes another GGUF \(sha256 000000000000…"):
        types_for("qwen2.5-coder-1.5b")
    (tmp_path / src.name).write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        types_for("qwen2.5-coder-1.5b")


@pytest.mark.parametrize("model", list(MODELS))
def test_the_records_match_the_gguf_files_where_present(model):
    g = gguf_path(MODELS[model])
    if not g.is_file():
        pytest.skip(f"{g} absent (python -m engine models --gguf-types assembles it)")
    assert gguf_types.read_types(g) == types_for(model)
