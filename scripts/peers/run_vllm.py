"""Run vLLM's CPU build on the prompts of a speclab trace and save its per-request spec-decode metrics.

Runs in the peers venv (scripts/peers/install.sh), never in the project's; it imports nothing of the
project, only reads the trace's JSON lines (prompt token ids, question ids, categories), so vLLM sees
exactly the token ids speclab decoded. Writes

  OUT.jsonl   line 1: {"type": "speclab.peer_header", versions, models, method, K, …};
              then one offline record per prompt (engine.interop.vllm reads it):
              {"request_id", "question_id", "category", "prompt_token_ids", "token_ids", "text",
               "finish_reason", "spec_decode_metrics": outputs[0].spec_decode_metrics.to_dict(),
               "metrics": {"time_to_first_token_ms", "generation_time_ms"}, "wall_ms"}
  OUT.prom    the engine's Prometheus counters after the run (prometheus_client's text exposition of
              the in-process registry vLLM's stat logger fills), and OUT.before.prom after the warm-up,
              so the run's own counts are the difference.

Usage (greedy, one prompt at a time):
  ~/.cache/speclab/peers/vllm/bin/python scripts/peers/run_vllm.py --target DIR [--draft DIR]
      --method ar|draft|ngram --k 4 --prompts-from TRACE.jsonl --max-tokens 48 --out OUT.jsonl

With --serve (what `python -m engine peers` starts, engine/bench/peer_engines.py) the engine stays up
and answers requests: one JSON line on stdin per request, {"prompt_token_ids": [...], "max_tokens": N}
(greedy), one line on stdout per answer, the record above prefixed with "@@speclab " (vLLM's own log
lines never start so); the first such line, {"ready": true, versions…}, follows the start and a
4-token warm-up. stdin closed: the engine shuts down.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", default=None)
    ap.add_argument("--method", choices=["ar", "draft", "ngram"], required=True)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--prompts-from", default=None, help="a speclab trace: its requests' prompt_ids")
    ap.add_argument("--serve", action="store_true", help="answer requests from stdin (see the module doc)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--memory", type=float, default=0.45, help="gpu_memory_utilization: the share of RAM vLLM's CPU "
                                                                 "build reserves for weights and KV cache")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import prometheus_client
    import torch
    import transformers
    import vllm
    from vllm import LLM, SamplingParams

    prompts = []
    if not a.serve:
        if not a.prompts_from:
            ap.error("--prompts-from is required (or --serve)")
        with open(a.prompts_from, encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                if d.get("type") == "request":
                    prompts.append(d)
    spec = None
    if a.method == "draft":
        spec = {"method": "draft_model", "model": a.draft, "num_speculative_tokens": a.k}
    elif a.method == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": a.k, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    t0 = time.perf_counter()
    llm = LLM(model=a.target, tokenizer=a.target, served_model_name=os.path.basename(a.target.rstrip("/")), dtype=a.dtype, enforce_eager=True, max_model_len=2048,
              gpu_memory_utilization=a.memory, speculative_config=spec, disable_log_stats=False, seed=0,
              per_request_spec_decode_metrics="detailed" if spec else "none")
    start_s = time.perf_counter() - t0
    sp = SamplingParams(temperature=0.0, max_tokens=a.max_tokens)
    warm = SamplingParams(temperature=0.0, max_tokens=4)
    if a.serve:
        return serve(llm, spec, start_s, {"vllm_version": vllm.__version__, "torch": torch.__version__,
                                          "transformers": transformers.__version__, "python": platform.python_version(),
                                          "threads": torch.get_num_threads(), "speculative_config": spec,
                                          "dtype": a.dtype})
    llm.generate([{"prompt_token_ids": prompts[0]["prompt_ids"]}], warm, use_tqdm=False)  # the slow first request
    base, _ = os.path.splitext(a.out)
    with open(base + ".before.prom", "wb") as f:
        f.write(prometheus_client.generate_latest())
    records = []
    for p in prompts:
        records.append(generate(llm, p["prompt_ids"], sp) | {"question_id": p.get("question_id"),
                                                              "category": p.get("category", "")})
        o = records[-1]
        print(f"q{p.get('question_id')}: {len(o['token_ids'])} tokens in {o['wall_ms'] / 1e3:.1f} s"
              + (f", mean acceptance length {o['spec_decode_metrics']['mean_acceptance_length']:.3f}"
                 if spec and o["spec_decode_metrics"] else ""), flush=True)
    with open(base + ".prom", "wb") as f:
        f.write(prometheus_client.generate_latest())
    header = {"type": "speclab.peer_header", "engine": "vllm", "vllm_version": vllm.__version__,
              "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
              "machine": platform.machine(), "threads": torch.get_num_threads(), "target": os.path.basename(a.target.rstrip("/")),
              "draft": os.path.basename(a.draft.rstrip("/")) if a.method == "draft" else None,
              "method": a.method, "num_speculative_tokens": a.k if spec else 0, "speculative_config": spec,
              "dtype": a.dtype, "max_tokens": a.max_tokens, "temperature": 0.0, "engine_start_s": round(start_s, 1),
              "prompts_from": os.path.basename(a.prompts_from),
              "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(a.out, "w", encoding="utf-8") as f:
        for r in [header, *records]:
            f.write(json.dumps(r) + "\n")
    print(f"wrote {a.out} ({len(records)} requests; engine start {start_s:.0f} s)")
    return 0


def generate(llm, prompt_ids: list, sp) -> dict:
    """One greedy request, timed around `LLM.generate`: the offline record engine.interop.vllm reads."""
    t = time.perf_counter()
    (res,) = llm.generate([{"prompt_token_ids": prompt_ids}], sp, use_tqdm=False)
    wall = (time.perf_counter() - t) * 1e3
    o = res.outputs[0]
    m = getattr(res, "metrics", None)
    times = {}
    if m is not None and getattr(m, "first_token_ts", 0) > 0:
        if getattr(m, "scheduled_ts", 0) > 0:
            times["time_to_first_token_ms"] = (m.first_token_ts - m.scheduled_ts) * 1e3
        if getattr(m, "last_token_ts", 0) > 0:
            times["generation_time_ms"] = (m.last_token_ts - m.first_token_ts) * 1e3
    return {"request_id": res.request_id, "prompt_token_ids": list(res.prompt_token_ids),
            "token_ids": list(o.token_ids), "text": o.text, "finish_reason": o.finish_reason,
            "spec_decode_metrics": o.spec_decode_metrics.to_dict() if o.spec_decode_metrics else None,
            "metrics": times, "wall_ms": round(wall, 3)}


def serve(llm, spec, start_s: float, info: dict) -> int:
    import sys

    from vllm import SamplingParams

    def say(d: dict) -> None:
        sys.stdout.write("@@speclab " + json.dumps(d) + "\n")
        sys.stdout.flush()

    # the slow first request, untimed ("Hello, world." in Qwen2's vocabulary; any ids would do)
    llm.generate([{"prompt_token_ids": [9707, 11, 1879, 13]}], SamplingParams(temperature=0.0, max_tokens=4),
                 use_tqdm=False)
    say({"ready": True, "engine_start_s": round(start_s, 1), **info})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            q = json.loads(line)
            sp = SamplingParams(temperature=0.0, max_tokens=int(q["max_tokens"]))
            say(generate(llm, list(q["prompt_token_ids"]), sp))
        except Exception as e:  # one line back, the engine stays up
            say({"error": f"{type(e).__name__}: {e}"})
    return 0


if __name__ == "__main__":  # the engine core runs in a spawned process: this guard is required
    raise SystemExit(main())
