"""The GPU check: one script a CUDA machine runs end to end, with nothing downloaded.

    python -m engine gpu-check --out gpu-check.json                 # CUDA: exactness fp32, costs bf16
    python -m engine gpu-check --device cpu --layers 2 --vocab 4096 # the same code path on CPU (tests)

1. Greedy exactness of `engine.decode.decode` on the device in fp32: a random-initialised target of
   the Qwen2.5-Coder-1.5B shape (layers cut by --layers) and a draft that is the target plus noise
   (so some drafts are accepted and some rejected); speculative output must equal autoregressive
   output token for token, for several windows.
2. Cost curves for random-initialised models of the pair's exact shapes (configs only): the target's
   verify cost v(k) = t(k-token forward) / t(1-token forward) for k ∈ {1, 2, 3, 4, 5, 8, 16} and the
   draft's cost ratio c = t_draft(1) / t_target(1), each a median over repeats on a KV cache of
   --context tokens, timed with device synchronisation (CUDA kernels run asynchronously: without a
   sync a timer measures kernel launches).

Random weights cost the same FLOPs and bytes as trained ones, so the curves are the pair's curves.
"""

from __future__ import annotations

import torch

from engine.decode import DecodeConfig, decode
from engine.models.load import machine_description, resolve_device
from engine.core.lm import HFModel
from engine.measure import forward_curve
from engine.policies.base import parse_policy

# Shapes of the realistic pair (config.json of the converted models).
SHAPES = {
    "target": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                   num_key_value_heads=2),
    "draft": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2),
}
VOCAB = 151_936


def build(role: str, dtype: torch.dtype, device: str, layers: int | None = None, vocab: int = VOCAB, seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = dict(SHAPES[role])
    if layers:
        shape["num_hidden_layers"] = layers
    cfg = Qwen2Config(vocab_size=vocab, max_position_embeddings=4096, rope_theta=1e6, tie_word_embeddings=False,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, **shape)
    torch.manual_seed(seed)
    with torch.device(device):
        m = Qwen2ForCausalLM(cfg)
    return m.to(dtype).eval()


def exactness(device: str, layers: int, vocab: int, n: int = 48, windows=(1, 3, 6)) -> dict:
    target = build("target", torch.float32, device, layers or 2, vocab, seed=0)
    draft = build("target", torch.float32, device, layers or 2, vocab, seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a draft that agrees often, but not always
        for p in draft.parameters():
            p.add_((0.02 * p.float().std() * torch.randn(p.shape, generator=g)).to(p.device, p.dtype))
    t, d = HFModel(target, "target"), HFModel(draft, "draft")
    prompt = torch.randint(0, vocab, (24,), generator=g).tolist()
    cfg = DecodeConfig(max_new_tokens=n)
    ar = [x for r in decode(t, None, prompt, None, cfg) for x in r.emitted_tokens]
    out = {}
    for w in windows:
        recs = list(decode(t, d, prompt, parse_policy(f"fixed:{w}"), cfg))
        toks = [x for r in recs for x in r.emitted_tokens]
        out[f"fixed:{w}"] = {"equal": toks == ar, "accepted": sum(r.accepted for r in recs),
                             "drafted": sum(r.window for r in recs), "target_calls": len(recs)}
    return {"tokens": n, "all_equal": all(v["equal"] for v in out.values()), "runs": out}


@torch.inference_mode()
def curve(model, device: str, context: int, ks, reps: int) -> dict[int, float]:
    """Median ms of a k-token forward after `context` random tokens (engine.measure: synchronised)."""
    lm = HFModel(model)
    ids = torch.randint(0, model.config.vocab_size, (context + 1,)).tolist()
    return forward_curve(lm, ids, ks, repeats=reps, warmup=2)  # two warm-ups: allocator, kernel selection


def costs(device: str, dtype: torch.dtype, layers: int | None, vocab: int, context: int, reps: int) -> dict:
    ks = (1, 2, 3, 4, 5, 8, 16)
    t = build("target", dtype, device, layers, vocab)
    vt = curve(t, device, context, ks, reps)
    del t
    d = build("draft", dtype, device, layers, vocab)
    vd = curve(d, device, context, (1,), reps)
    del d
    return {"dtype": str(dtype).replace("torch.", ""), "context": context, "t_target_ms": vt,
            "v": {k: vt[k] / vt[1] for k in ks}, "t_draft_ms": vd[1], "c": vd[1] / vt[1]}


def run(device: str = "auto", dtype: str = "bf16", layers: int | None = None, vocab: int = VOCAB, context: int = 256,
        reps: int = 10) -> dict:
    """Exactness (fp32, layers cut to `layers` or 2, vocabulary ≤ 4096) and the cost curves in `dtype`."""
    dev = resolve_device(device)
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[dtype]
    return {"machine": machine_description(), "device": dev, "torch": torch.__version__,
            "exactness_fp32": exactness(dev, layers or 2, min(vocab, 4096)),
            "costs": costs(dev, dt, layers, vocab, context, reps)}


if __name__ == "__main__":  # recorded `python -m engine.bench.gpu_check …` commands run as `python -m engine gpu-check …`
    import sys

    from engine.__main__ import main

    sys.exit(main(["gpu-check", *sys.argv[1:]]))
