"""Write the bundled tiny-model demo traces into traces/ so the app has data on a fresh clone.

    python -m app.make_demo_traces            # traces/demo-tiny-<policy>.jsonl, a few seconds on CPU

The traces come from the real decode loop (`engine.run.run_requests`) driving the tiny random
Llama pair in `app.demo_models`, over one Spec-Bench dev question per task (bytes folded into the
64-token vocabulary; questions from ../shared/spec_bench when present, else a few built-in lines).
A reference run (`engine.offline.reference`, demo-tiny-reference.jsonl) over the same prompts feeds the
Windows page. One multi-draft trace, demo-tiny-rbv-k3-t07.jsonl, feeds Replay's multi-draft view:
K = 3 i.i.d. drafts per step (`MultiDrafter`), scored in one target pass (`TreeTarget`), verified
by RBV at T = 0.7, over the first MULTI_PROMPTS prompts cut to MULTI_PROMPT_BYTES tokens, with at
most MULTI_TOKENS new tokens. At T = 0.7 the tiny pair's distributions are close, so nearly every
block is accepted whole and draft 0 is followed.

All are marked in their header (`demo`) so the Overview labels them as tiny-model demo data; real
SmolLM2 traces written by `python -m engine decode` sit next to them and replace them as defaults.
`--only NAME …` rewrites just some of them (e.g. `--only rbv-k3-t07`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEV_QUESTIONS = REPO.parent / "shared" / "spec_bench" / "questions_dev.jsonl"
# A draft-free run gives the autoregressive baseline the Compare page measures against.
POLICIES = ["autoregressive", "fixed:2", "fixed:4", "fixed:8", "heuristic", "confidence:0.4", "cumulative:0.6"]
# The multi-draft demo: K drafts, verifier and temperature as in its file name; kept small.
MULTI = {"name": "rbv-k3-t07", "verifier": "rbv", "k": 3, "temperature": 0.7, "policy": "fixed:4"}
MULTI_PROMPTS = 3  # a few prompts …
MULTI_PROMPT_BYTES = 40  # … of at most 40 tokens (one per byte) …
MULTI_TOKENS = 32  # … and at most this many new tokens: the view is about single steps
FALLBACK = [("writing", "Write a short note to a friend."), ("qa", "Who wrote the Iliad?"),
            ("math_reasoning", "What is 17 times 23?"), ("translation", "Translate 'good morning' into German.")]


def demo_prompts(prompt_bytes: int):
    from engine.trace.prompts import load_prompts, task_of
    from engine.run import Request
    from app.demo_models import text_to_ids

    if DEV_QUESTIONS.is_file():
        seen, picked = set(), []
        for p in load_prompts(DEV_QUESTIONS):
            if task_of(p.category) not in seen:
                seen.add(task_of(p.category))
                picked.append((p.category, p.text, p.question_id))
    else:
        picked = [(c, t, i) for i, (c, t) in enumerate(FALLBACK)]
    return [Request(text_to_ids(t[:prompt_bytes]), t[:prompt_bytes], c, q) for c, t, q in picked]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m app.make_demo_traces", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "traces"), help="directory for demo-tiny-*.jsonl")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--prompt-bytes", type=int, default=80, help="keep the first N bytes of each question")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--only", nargs="+", default=None, metavar="NAME",
                    help="write only these outputs, by file-name part: e.g. fixed4 reference rbv-k3-t07")
    a = ap.parse_args(argv)
    wanted = (lambda name: a.only is None or name in a.only)

    import torch

    from app.demo_models import TINY_LABEL, tiny_pair
    from engine.decode import DecodeConfig
    from engine.policies.base import parse_policy
    from engine.run import run_requests
    from engine.core.sampling import SamplingConfig

    torch.set_num_threads(1)  # tiny matrices: threading costs more than it saves
    target, draft = tiny_pair()
    requests = demo_prompts(a.prompt_bytes)
    cfg = DecodeConfig(max_new_tokens=a.max_new_tokens, sampling=SamplingConfig(temperature=a.temperature))
    command = " ".join(["python -m app.make_demo_traces", *(argv if argv is not None else sys.argv[1:])])
    for spec in POLICIES:
        ar = spec == "autoregressive"
        name = spec.replace(":", "").replace(".", "")
        if not wanted(name):
            continue
        out = Path(a.out) / f"demo-tiny-{name}.jsonl"
        s = run_requests(target, None if ar else draft, None if ar else parse_policy(spec), cfg, requests, out,
                         progress=False, decode_text=lambda ids: " ".join(map(str, ids)),
                         header_extra={"demo": TINY_LABEL, "command": command})
        print(f"{out}: {s['target_calls']} target calls, mean emitted per call (incl. bonus) "
              f"{s['mean_emitted_per_call_incl_bonus']:.2f}, acceptance {s['draft_acceptance_rate']:.2f}")
    if wanted(MULTI["name"]):
        multi = demo_prompts(min(a.prompt_bytes, MULTI_PROMPT_BYTES))[:MULTI_PROMPTS]
        write_multi_draft(target, draft, multi, Path(a.out), min(a.max_new_tokens, MULTI_TOKENS), command)
    # The reference run the Windows page analyses: any policy, the oracle included, replays from it.
    if wanted("reference"):
        from engine.offline.reference import ReferenceConfig, build_reference

        ref = Path(a.out) / "demo-tiny-reference.jsonl"
        build_reference(target, draft, [{"prompt_ids": r.prompt_ids, "category": r.category,
                                         "question_id": r.question_id, "text": r.text} for r in requests],
                        ReferenceConfig(max_new_tokens=a.max_new_tokens, sampling=cfg.sampling, timing_repeats=3),
                        ref, progress=False, header_extra={"demo": TINY_LABEL, "command": command})
        print(f"{ref}: reference run over {len(requests)} prompts")
    return 0


def write_multi_draft(target, draft, requests, out_dir: Path, max_new_tokens: int, command: str) -> Path:
    """demo-tiny-rbv-k3-t07.jsonl: the decode loop with K i.i.d. drafts per step, wired as the CLI and
    `engine.bench.multibench` wire them (MultiDrafter over the draft, TreeTarget over the target)."""
    from app.demo_models import TINY_LABEL
    from engine.decode import DecodeConfig
    from engine.drafters.multi import MultiDraftConfig, MultiDrafter
    from engine.policies.base import parse_policy
    from engine.run import run_requests
    from engine.core.sampling import SamplingConfig
    from engine.core.tree import TreeTarget

    cfg = DecodeConfig(max_new_tokens=max_new_tokens, verifier=MULTI["verifier"],
                       sampling=SamplingConfig(temperature=MULTI["temperature"]))
    out = out_dir / f"demo-tiny-{MULTI['name']}.jsonl"
    s = run_requests(TreeTarget(target), MultiDrafter(draft, MultiDraftConfig(k=MULTI["k"])),
                     parse_policy(MULTI["policy"]), cfg, requests, out, progress=False,
                     decode_text=lambda ids: " ".join(map(str, ids)),
                     header_extra={"demo": TINY_LABEL, "command": command, "k": MULTI["k"]})
    print(f"{out}: {s['target_calls']} target calls, K = {MULTI['k']} drafts per step, verifier {MULTI['verifier']}, "
          f"T = {MULTI['temperature']}, mean emitted per call (incl. bonus) "
          f"{s['mean_emitted_per_call_incl_bonus']:.2f}")
    return out


if __name__ == "__main__":
    sys.exit(main())
