"""Which GGUF tensor type each weight of an installed model had: the plan of `--weights quantized`.

`make models` de-quantises the pinned GGUF files to dense safetensors and (by default) deletes them,
so the types are recorded once per pinned file, committed beside the models' other data:

    models/qwen2.5-coder/<name>.gguf-types.json   {"gguf_sha256": …, "types": {hf name: GGUF type}}

`read_types(gguf)` reads them from a GGUF header (llama.cpp's tensor names mapped to transformers'
Qwen2 / Llama names); `types_for(model)` gives the committed record of a pinned model, checked against
the pinned sha256; `python -m engine models --gguf-types` rewrites the records from the GGUF files.

Name map (blk.N.X → model.layers.N.Y):
    attn_q/k/v → self_attn.q_proj/k_proj/v_proj    attn_output → self_attn.o_proj
    ffn_gate/up/down → mlp.gate_proj/up_proj/down_proj
    attn_norm → input_layernorm    ffn_norm → post_attention_layernorm
    token_embd → model.embed_tokens    output → lm_head    output_norm → model.norm
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.paths import MODELS_DIR

TYPES_DIR = MODELS_DIR / "qwen2.5-coder"
_BLOCK = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
          "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
          "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
_TOP = {"token_embd": "model.embed_tokens", "output": "lm_head", "output_norm": "model.norm"}


def hf_name(gguf_name: str) -> str | None:
    """transformers' parameter name for a llama.cpp tensor name, or None if unmapped.

    >>> hf_name("blk.3.ffn_down.weight")
    'model.layers.3.mlp.down_proj.weight'
    """
    parts = gguf_name.split(".")
    if parts[0] == "blk" and len(parts) == 4 and parts[2] in _BLOCK:
        return f"model.layers.{parts[1]}.{_BLOCK[parts[2]]}.{parts[3]}"
    if len(parts) == 2 and parts[0] in _TOP:
        return f"{_TOP[parts[0]]}.{parts[1]}"
    return None


def read_types(gguf: Path) -> dict[str, str]:
    """{transformers name: GGUF type name} of every mapped tensor in a GGUF file."""
    from gguf import GGUFReader

    out = {}
    for t in GGUFReader(str(gguf)).tensors:
        n = hf_name(t.name)
        if n is not None:
            out[n] = t.tensor_type.name
    return out


def types_path(model: str) -> Path:
    return TYPES_DIR / f"{model}.gguf-types.json"


def write_types(model: str, gguf: Path, sha256: str) -> Path:
    p = types_path(model)
    p.write_text(json.dumps({"model": model, "gguf_sha256": sha256, "types": read_types(gguf)},
                            indent=0, sort_keys=True) + "\n")
    return p


def types_for(name: str) -> dict[str, str] | None:
    """The committed GGUF types of an installable model (`engine.models.provision.MODELS`; None for any
    other name); a record whose sha256 is not the pinned one raises ValueError (it describes another file)."""
    from engine.models.provision import MODELS

    if name not in MODELS:
        return None
    model = MODELS[name]
    p = types_path(model.name)
    if not p.is_file():
        return None
    try:
        rec = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p.name}: not valid JSON ({e.msg}, line {e.lineno})") from None
    if rec.get("gguf_sha256") != model.gguf_sha256:
        raise ValueError(f"{p.name} describes another GGUF (sha256 {str(rec.get('gguf_sha256'))[:12]}…, pinned "
                         f"{model.gguf_sha256[:12]}…): python -m engine models --gguf-types")
    return dict(rec["types"])
