"""Cross-engine agreement: vLLM's mean acceptance length against speclab's on the same prompts.

    PYTHONPATH=. .venv/bin/python scripts/peers/agreement.py --vllm tests/fixtures/peers/vllm-draft-k2.jsonl \
        --ours TRACE.jsonl [--tokens 48] [--label "fixed:2 reduced head"]

Both sides are read through the project's own code (engine.interop.vllm for vLLM's records, the trace
loader for ours); prompts are paired by their token ids and must match exactly. `--tokens N` cuts our
trace at N new tokens (a greedy run's first N tokens are those of an N-token run) and drops the steps
after the one that reached N. Per prompt and pooled: vLLM's mean acceptance length (1 + accepted ÷
drafting steps) for both, and whether the outputs agree token for token.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.interop import vllm
from engine.interop.diagnose import counts_of
from engine.interop.peer import to_trace
from engine.trace.format import load_trace


def cut(steps: list[dict], tokens: int | None) -> list[dict]:
    if tokens is None:
        return steps
    out, n = [], 0
    for s in steps:
        if n >= tokens:
            break
        out.append(s)
        n += s["emitted"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm", required=True)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--tokens", type=int, default=None)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    name = Path(a.vllm).name
    v = to_trace(vllm.vllm_records(Path(a.vllm).read_bytes(), name), name)
    o = load_trace(a.ours)
    by_prompt = {tuple(r["prompt_ids"]): rid for rid, r in o.requests.items()}
    rows, pooled_v, pooled_o = [], [], []
    for rid, r in v.requests.items():
        orid = by_prompt.get(tuple(r["prompt_ids"]))
        if orid is None:
            print(f"prompt of vLLM request {rid} (question {r.get('question_id')}) is not in {a.ours}", file=sys.stderr)
            return 1
        vs = [s for s in v.steps if s["request_id"] == rid and s["window"]]
        os_ = cut([s for s in o.steps if s["request_id"] == orid], a.tokens)
        os_ = [s for s in os_ if s["window"]]
        same = v.ends[rid]["output_ids"][: a.tokens or None] == (o.ends[orid]["output_ids"][: a.tokens or None])
        mv, mo = counts_of(vs, True), counts_of(os_, True)
        rows.append((o.requests[orid].get("question_id"), o.requests[orid].get("category"), mv, mo, same))
        pooled_v += vs
        pooled_o += os_
    pv, po = counts_of(pooled_v, True), counts_of(pooled_o, True)
    print(f"| question | task | vLLM mean acc. length | speclab {a.label} | vLLM rate | speclab rate | same output |")
    print("|---|---|---|---|---|---|---|")
    for q, cat, mv, mo, same in rows:
        print(f"| {q} | {cat} | {mv['mean_acceptance_length']:.3f} | {mo['mean_acceptance_length']:.3f} | "
              f"{mv['draft_acceptance_rate']:.3f} | {mo['draft_acceptance_rate']:.3f} | {'yes' if same else 'no'} |")
    gap = pv["mean_acceptance_length"] / po["mean_acceptance_length"] - 1
    print(f"| **pooled** | {len(rows)} prompts | **{pv['mean_acceptance_length']:.3f}** | "
          f"**{po['mean_acceptance_length']:.3f}** | {pv['draft_acceptance_rate']:.3f} | "
          f"{po['draft_acceptance_rate']:.3f} | vLLM {gap:+.1%} |")
    print(f"steps: vLLM {pv['num_spec_steps']}, speclab {po['num_spec_steps']}; accepted per position: vLLM "
          f"{pv['num_accepted_tokens_per_pos']}, speclab {po['num_accepted_tokens_per_pos']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
