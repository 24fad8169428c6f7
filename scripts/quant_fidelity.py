"""How far a weights path moves a model's next-token distributions from its dense path: the dense model and each
arm teacher-forced over the same Spec-Bench dev prompts (their first `--max-tokens` tokens each); per arm the mean
KL(dense ‖ arm) per position and the share of positions whose top token agrees.

    python scripts/quant_fidelity.py --model qwen2.5-coder-1.5b --out docs/results/quant-fidelity-qwen-<cpu>.json
    python scripts/quant_fidelity.py --rows 8 --arms quantized ...   the decode kernels' own activations (SPECLAB_QGEMM=avx2:
                                      the AVX2 build's, every format's activations per 32)

Arms (`--arms`, all by default): `quantized` (each linear at its GGUF type's format: the GGUF's own Q4_K, Q5_0,
Q8_0 and Q6_K blocks where the file is on disk), `quantized-q6k-int6` (that, with the Q6_K tensors re-quantised to
int6 groups: the mapping before Q6_K was read as stored),
`quantized-requant` (every block re-quantised instead — Q4_K to int4 groups, Q5_0 and Q8_0 to int8 groups, Q6_K to
int6 — SPECLAB_GGUF_BLOCKS=0: the mapping before they were read as stored; the 1.5B's record of 2026-12-06 names it
`quantized-int4-requant`), `quantized-q6k-int8` (that, with the Q6_K tensors at int8: the mapping before int6),
`int4` (every linear at int4). Why it exists: each format of the
quantized path trades bytes a token against fidelity, and this is the fidelity side.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ARMS = ("quantized", "quantized-q6k-int6", "quantized-requant", "quantized-q6k-int8", "int4")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--prompts", default=str(REPO.parent / "shared" / "spec_bench" / "questions_dev.jsonl"))
    p.add_argument("--per-task", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    p.add_argument("--rows", type=int, default=0,
                   help="feed each prompt through the cache this many tokens a forward (≤ 64: the decode kernels, their "
                        "activations quantized as a step's are); 0: one forward a prompt (a prefill: the weights alone)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    arms = [x for x in a.arms.split(",") if x]
    if not arms or set(arms) - set(ARMS):
        p.error(f"--arms takes {', '.join(ARMS)}; got {a.arms!r}")
    if not 0 <= a.rows <= 64:
        p.error(f"--rows must be 0 … 64, got {a.rows}")

    import torch
    from tqdm import tqdm

    from engine.kernels import qkernel, quant
    from engine.models.load import load_model, machine_description, software_versions
    from engine.trace.prompts import encode, load_prompts

    torch.set_num_threads(a.threads)
    prompts = load_prompts(a.prompts, per_category=a.per_task)
    dense = load_model(a.model, "bf16", "cpu", role="model", weights="dense")
    ids = [encode(dense.tokenizer, pr.text if hasattr(pr, "text") else pr["turns"][0])[:a.max_tokens] for pr in prompts]
    def logprobs(model, x):
        """log p over x's positions: one forward, or `--rows` tokens a forward through the cache."""
        if not a.rows:
            return model(torch.tensor([x])).logits[0].float().log_softmax(-1)
        from transformers import DynamicCache

        cache, out = DynamicCache(), []
        for i in range(0, len(x), a.rows):
            out.append(model(torch.tensor([x[i:i + a.rows]]), past_key_values=cache, use_cache=True).logits[0])
        return torch.cat(out).float().log_softmax(-1)

    with torch.inference_mode():
        ref = [logprobs(dense.lm.model, x) for x in tqdm(ids, desc="dense")]
    del dense
    rows = []
    for arm in arms:
        saved = quant.GGUF_INT6, quant.GGUF_INT8, os.environ.get("SPECLAB_GGUF_BLOCKS"), dict(qkernel.ONLY_ON)
        if arm == "quantized-q6k-int6":  # no build reads Q6_K blocks: the plan's int6 for those tensors
            qkernel.ONLY_ON[qkernel.Q6K] = ()
        if arm == "quantized-q6k-int8":  # the plan as it was: Q6_K among the 8-bit types
            quant.GGUF_INT6, quant.GGUF_INT8 = (), saved[1] + saved[0]
        if arm in ("quantized-requant", "quantized-q6k-int8"):  # the GGUF's blocks re-quantised, not read as stored
            os.environ["SPECLAB_GGUF_BLOCKS"] = "0"
        try:
            m = load_model(a.model, "bf16", "cpu", role="model", weights="int4" if arm == "int4" else "quantized")
        finally:
            quant.GGUF_INT6, quant.GGUF_INT8 = saved[:2]
            qkernel.ONLY_ON.clear()
            qkernel.ONLY_ON.update(saved[3])
            if saved[2] is None:
                os.environ.pop("SPECLAB_GGUF_BLOCKS", None)
            else:
                os.environ["SPECLAB_GGUF_BLOCKS"] = saved[2]
        kl = agree = n = 0
        with torch.inference_mode():
            for x, ld in zip(tqdm(ids, desc=arm), ref):
                lq = logprobs(m.lm.model, x)
                kl += float((ld.exp() * (ld - lq)).sum())
                agree += int((ld.argmax(-1) == lq.argmax(-1)).sum())
                n += len(x)
        rows.append({"arm": arm, "positions": n, "mean_kl": kl / n, "top1_agree": agree / n,
                     "packed_bytes": sum(b.numel() * b.element_size() for b in m.lm.model.buffers())})
        print(f"{arm}: mean KL {kl / n:.4f}, top-1 agreement {agree / n:.3f} over {n} positions")
        del m

    rec = {"model": a.model, "rows": rows, "prompts": len(ids), "prompts_file": a.prompts,
           "rows_a_forward": a.rows or None, "qgemm_build": qkernel.variant(),
           "machine": machine_description(), "software": software_versions(),
           "command": "python " + " ".join(["scripts/quant_fidelity.py", *sys.argv[1:]]),
           "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "experiment": "scripts/quant_fidelity.py"}
    Path(a.out).write_text(json.dumps(rec, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
