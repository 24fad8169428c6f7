"""llama.cpp runs behind tests/fixtures/peers/llamacpp-*: the Qwen pair's GGUFs (the Q4_K_M target, the
draft), greedy, the Spec-Bench dev prompts of a speclab trace (the very prompt token ids speclab decoded),
2 threads. Needs `scripts/peers/install.sh llamacpp` and the GGUFs (`python -m engine models --keep-gguf`).

Runs with the project's Python (it drives llama-server over HTTP through engine.bench.peer_engines):

  PYTHONPATH=. .venv/bin/python scripts/peers/run_llamacpp.py [--prompts-from TRACE] [--out DIR]

Writes into DIR (default ~/.cache/speclab/peers/runs; scripts/peers/collect_fixtures.sh copies them):

  llamacpp-ar.jsonl, llamacpp-draft-k2.jsonl, llamacpp-draft-k4.jsonl
      line 1 {"type": "speclab.peer_header", "engine": "llama.cpp", version, models, "n_draft": K, command…};
      then llama-server's /completion response per prompt, as the server returned it (its own
      `response_fields` selection: content, tokens, stop_type, timings, …), plus "question_id",
      "category" and "speclab_counters": the change of the server's /metrics speculative counters
      over that request (drafts = verify steps, draft tokens, accepted, accepted per position)
  llamacpp-speculative-simple-k4.log
      `llama-speculative-simple` on the first prompts (text: the prompt ids detokenised by the server),
      its stderr as printed: the n_drafted / n_accept / accept summary engine.interop.llamacpp reads
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from engine.bench.peer_engines import LlamaServer, llama_version
from engine.models.provision import cache_root
from engine.trace.parse import read_jsonl

FIELDS = ["content", "tokens", "stop", "stop_type", "stopping_word", "tokens_predicted", "tokens_evaluated",
          "truncated", "timings", "model"]


def main() -> int:
    here = Path(__file__).resolve().parent
    c = cache_root()
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts-from", default=str(here.parents[1] / "docs/results/bench-qwen-bf16/fixed-2-t0.jsonl"))
    ap.add_argument("--bin", default=str(c / "peers/llama.cpp/build/bin"))
    ap.add_argument("--target", default=str(c / "gguf/qwen2.5-coder-1.5b.gguf"))
    ap.add_argument("--draft", default=str(c / "gguf/qwen2.5-coder-0.5b.gguf"))
    ap.add_argument("--configs", default="ar:0,draft:2,draft:4")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--simple-prompts", type=int, default=2, help="prompts for the llama-speculative-simple log")
    ap.add_argument("--out", default=str(c / "peers/runs"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    prompts = [d for d in read_jsonl(a.prompts_from) if d.get("type") == "request"]  # the one JSONL reader
    version = llama_version(Path(a.bin))
    for cfg in a.configs.split(","):
        m, k = cfg.split(":")
        k = int(k)
        s = LlamaServer(Path(a.bin), Path(a.target), Path(a.draft) if m == "draft" else None, k, a.threads,
                        log=out / f"llamacpp-{m}-k{k}.server.log")
        start = s.start()
        try:
            s.complete(tuple(prompts[0]["prompt_ids"]), 4)  # the slow first request, untimed
            records = []
            for p in prompts:
                d = s.complete(tuple(p["prompt_ids"]), a.max_tokens, fields=FIELDS)
                wall = d.pop("wall_ms")
                d["speclab_counters"] = d.pop("spec_counters")
                records.append({"question_id": p.get("question_id"), "category": p.get("category", ""), **d,
                                "wall_ms": round(wall, 3)})
                t = d["timings"]
                print(f"{cfg} q{p.get('question_id')}: {t['predicted_n']} tokens, {t['predicted_per_second']:.1f} "
                      f"tokens/s" + (f", accepted {t['draft_n_accepted']}/{t['draft_n']}" if "draft_n" in t else ""),
                      flush=True)
            if m == "draft" and k == max(int(x.split(":")[1]) for x in a.configs.split(",")) and a.simple_prompts:
                texts = [detokenize(s.url, p["prompt_ids"]) for p in prompts[: a.simple_prompts]]
        finally:
            s.stop()
        name = "ar" if m == "ar" else f"draft-k{k}"
        header = {"type": "speclab.peer_header", "engine": "llama.cpp", "version": version,
                  "target": Path(a.target).stem, "draft": Path(a.draft).stem if m == "draft" else None,
                  "n_draft": k if m == "draft" else None, "threads": a.threads, "max_tokens": a.max_tokens,
                  "temperature": 0.0, "server_start_s": round(start, 1), "prompts_from": Path(a.prompts_from).name,
                  "server_args": " ".join(Path(x).name if "/" in x else x for x in s.cmd[1:]),
                  "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with open(out / f"llamacpp-{name}.jsonl", "w", encoding="utf-8") as f:
            for r in [header, *records]:
                f.write(json.dumps(r) + "\n")
        print(f"wrote {out / f'llamacpp-{name}.jsonl'} (server start {start:.0f} s)")
    if a.simple_prompts:
        k = max(int(x.split(":")[1]) for x in a.configs.split(","))
        log = out / f"llamacpp-speculative-simple-k{k}.log"
        with open(log, "w", encoding="utf-8") as f:
            for text in texts:
                r = subprocess.run([str(Path(a.bin) / "llama-speculative-simple"), "-m", a.target, "-md", a.draft,
                                    "--spec-type", "draft-simple", "-p", text, "-n", str(a.max_tokens), "--temp", "0",
                                    "-t", str(a.threads),
                                    "-td", str(a.threads), "--spec-draft-n-max", str(k), "-c", "2048",
                                    "--seed", "0"], capture_output=True, text=True, timeout=1800)
                f.write(r.stderr)
                if r.returncode:
                    print(f"llama-speculative-simple exited with {r.returncode}", file=sys.stderr)
                    return 1
        print(f"wrote {log}")
    return 0


def detokenize(url: str, ids: list[int]) -> str:
    req = urllib.request.Request(url + "/detokenize", json.dumps({"tokens": ids}).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["content"]


if __name__ == "__main__":
    raise SystemExit(main())
