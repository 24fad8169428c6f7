"""Online evaluation (the engine's decode loop + lossless verifier) and the results report of
block-drafter objective comparisons.

Online: each run's drafter decodes the same prompts with `engine.decode.decode` (greedy, window
fixed at B−1 = one draft forward per target call); an autoregressive run of the same target over the
same prompts (once per call, in the same process) gives the exactness check and the baseline time. τ_online = mean emitted tokens per
target call (incl. the bonus/correction token). Speedup = AR wall time / block-drafter wall time on
this CPU (tiny models: a sanity figure, not the GPU regime).

The report over runs is engine/train/dpace/report.py; the export of the best run with its model card
engine/train/dpace/export.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from engine.trace.jsonio import write_json_atomic

def _prompts(path: str, per_category: int, prompt_len: int, root: Path) -> list[tuple[list[int], str, str, object]]:
    """Online prompts: the tiny target gets the first `prompt_len` bytes of each question (its training
    prompt length); SmolLM2 gets the whole question in its chat template, as every other benchmark."""
    from engine.trace.prompts import encode, load_prompts
    from engine.train.dpace.targets import kind_of, tokenizer

    tiny = kind_of(root) == "tiny"
    tok = tokenizer(root)
    out = []
    for p in load_prompts(path, per_category=per_category):
        if tiny:
            ids = tok.encode(p.text)[:prompt_len]
            out.append((ids, tok.decode(ids), p.category, p.question_id))
        else:
            out.append((encode(tok, p.text), p.text, p.category, p.question_id))
    return out


def _block_setup(d: Path, target, root: Path):
    """(drafter model, FeatureLM, BlockDrafter) for run directory d on the loaded target."""
    from engine.drafters.block import BlockDrafter, BlockLM, FeatureLM, load_block_drafter, load_block_vocab

    model = load_block_drafter(d / "drafter")
    ft = FeatureLM(target, model.config.target_layer_ids, name=target_name(root))
    return model, ft, BlockDrafter(BlockLM.from_target(model, target, load_block_vocab(d / "drafter")), ft)


def target_name(root: Path) -> str:
    from engine.train.dpace.targets import kind_of

    return "tiny-target" if kind_of(root) == "tiny" else "smollm2-135m-instruct"


def online_eval(run_dirs: list[Path], root: Path, prompts_file: str, per_category: int = 1,
                max_new_tokens: int = 160, prompt_len: int = 48, traces_dir: Path | None = None,
                threads: int = 1, progress: bool = True, n_heldout: int = 6, command: str = "") -> dict[str, dict]:
    """Decode the prompts with each run's drafter and with the target alone; returns {tag: result} and
    writes `online.json` into each run directory (skipped when present).

    Also decodes the prompts of the first `n_heldout` held-out training-distribution sequences
    (`tau_online_heldout`; their stored continuations are the target's greedy output, so the check
    of exactness is free), to separate the state weighting of online τ from the prompt shift."""
    from tqdm import tqdm

    from engine.decode import DecodeConfig, decode
    from engine.core.lm import HFModel
    from engine.policies.simple import Fixed
    from engine.run import Request, run_requests
    from engine.train.dpace.targets import eos_ids, load_block_data, load_target_model, tokenizer

    torch.set_num_threads(threads)
    target = load_target_model(root)
    prompts = _prompts(prompts_file, per_category, prompt_len, root)
    cfg = DecodeConfig(max_new_tokens=max_new_tokens)
    tok = tokenizer(root)
    eos = eos_ids(root)
    ar_lm = HFModel(target, name=target_name(root))  # the baseline computes no layer features
    results = {}
    todo = [d for d in run_dirs if not (d / "online.json").is_file()]
    for d in run_dirs:
        if (d / "online.json").is_file():
            results[d.name] = json.loads((d / "online.json").read_text())
    if not todo:
        return results
    # The autoregressive baseline once per call (same prompts, same process): outputs for the
    # exactness check, wall time for the speedup.
    ar_out, ar_s = [], []
    for rid, (ids, _, _, _) in enumerate(prompts):
        t0 = time.perf_counter()
        ar_out.append([t for r in decode(ar_lm, None, ids, None, cfg, eos_ids=eos, request_id=rid)
                       for t in r.emitted_tokens])
        ar_s.append(time.perf_counter() - t0)
    t_ar = sum(ar_s)
    bd = load_block_data(root)
    # Held-out training-distribution prompts and their reference outputs: for the tiny target the
    # stored greedy continuation (fixed length); for SmolLM2 an AR run here (the stored answers come
    # from batched generation, whose padding may flip a near-tie argmax).
    held = []
    for i in range(min(n_heldout, len(bd.held_ids))):
        p0, ln = int(bd.held_plen[i]), int(bd.held_len[i])
        p_ids = bd.held_ids[i, :p0].tolist()
        if bd.uniform:
            held.append((p_ids, bd.held_ids[i, p0:ln].tolist(), DecodeConfig(max_new_tokens=ln - p0)))
        else:
            ref = [t for r in decode(ar_lm, None, p_ids, None, cfg, eos_ids=eos, request_id=1000 + i)
                   for t in r.emitted_tokens]
            held.append((p_ids, ref, cfg))
    for d in tqdm(todo, desc="online", disable=not progress):
        model, ft, drafter = _block_setup(d, target, root)
        B = model.config.block_size
        calls = emitted = 0
        t_block = 0.0
        mismatch = 0
        for rid, (ids, _, _, _) in enumerate(prompts):
            t0 = time.perf_counter()
            out = []
            for r in decode(ft, drafter, ids, Fixed(B - 1), cfg, eos_ids=eos, request_id=rid):
                calls += 1
                emitted += r.emitted
                out.extend(r.emitted_tokens)
            t_block += time.perf_counter() - t0
            mismatch += int(out != ar_out[rid])
        h_calls = h_em = 0
        for i, (p_ids, ref, hcfg) in enumerate(held):
            out = []
            for r in decode(ft, drafter, p_ids, Fixed(B - 1), hcfg, eos_ids=eos, request_id=1000 + i):
                h_calls += 1
                out.extend(r.emitted_tokens)
            h_em += len(out)
            mismatch += int(out != ref)
        res = {"tau_online": emitted / calls, "tau_online_heldout": h_em / h_calls if h_calls else None,
               "heldout_prompts": len(held), "target_calls": calls, "new_tokens": emitted,
               "prompts": len(prompts), "block_s": round(t_block, 3), "ar_s": round(t_ar, 3),
               "speedup_cpu": t_ar / t_block if t_block > 0 else 0.0, "outputs_equal_ar": mismatch == 0,
               "max_new_tokens": max_new_tokens, "prompt_len": prompt_len,
               # the file's last two path parts: results carry no machine-specific paths
               "prompts_file": "/".join(Path(prompts_file).parts[-2:])}
        if traces_dir is not None:  # a standard decode trace of this drafter (app Replay/Compare pages)
            reqs = [Request(ids, text, cat, qid) for ids, text, cat, qid in prompts]
            trace = Path(traces_dir) / f"{d.name}.jsonl"
            run_requests(ft, drafter, Fixed(B - 1), cfg, reqs, trace, eos_ids=eos, decode_text=tok.decode, progress=False,
                         header_extra={"drafter": {"kind": "block", "run": d.name, "block_size": B},
                                       **({"command": command} if command else {})})
        write_json_atomic(res, d / "online.json")
        results[d.name] = res
    return results


def interleaved_speed(run_dirs: list[Path], root: Path, prompts_file: str, per_category: int = 1,
                      max_new_tokens: int = 160, prompt_len: int = 48, reps: int = 2, threads: int = 1,
                      windows: tuple[int, ...] = ()) -> dict:
    """CPU wall-clock speedup vs autoregressive, measured interleaved: for every prompt and repetition,
    AR then block-drafter decoding (then the reverse order on odd repetitions), so load drift hits
    both alike. The drafter runs with window B−1 (the whole block) and with each extra window w in
    `windows` (the first w tokens of the same single draft forward: a shorter verify, same drafter).
    Writes `speed.json` into each run directory; returns {tag: result}."""
    from engine.decode import DecodeConfig, decode
    from engine.core.lm import HFModel
    from engine.policies.simple import Fixed
    from engine.train.dpace.targets import eos_ids, load_target_model

    torch.set_num_threads(threads)
    target = load_target_model(root)
    prompts = _prompts(prompts_file, per_category, prompt_len, root)
    cfg = DecodeConfig(max_new_tokens=max_new_tokens)
    eos = eos_ids(root)
    ar_lm = HFModel(target, name=target_name(root))
    out = {}
    for d in run_dirs:
        model, ft, drafter = _block_setup(d, target, root)
        B = model.config.block_size
        ws = [B - 1] + [w for w in windows if 0 < w < B - 1]

        def run_ar(ids, rid):
            t0 = time.perf_counter()
            for _ in decode(ar_lm, None, ids, None, cfg, eos_ids=eos, request_id=rid):
                pass
            return time.perf_counter() - t0

        def run_blk(ids, rid, w):
            t0 = time.perf_counter()
            calls = emitted = 0
            for r in decode(ft, drafter, ids, Fixed(w), cfg, eos_ids=eos, request_id=rid):
                calls += 1
                emitted += r.emitted
            return time.perf_counter() - t0, calls, emitted

        t_ar = 0.0
        acc = {w: [0.0, 0, 0] for w in ws}

        def blk_all(ids, rid):
            for w in ws:
                t, c, e = run_blk(ids, rid, w)
                acc[w][0] += t
                acc[w][1] += c
                acc[w][2] += e

        for rep in range(reps):
            for rid, (ids, _, _, _) in enumerate(prompts):
                if rep % 2 == 0:
                    t_ar += run_ar(ids, rid)
                    blk_all(ids, rid)
                else:
                    blk_all(ids, rid)
                    t_ar += run_ar(ids, rid)
        t_blk = acc[B - 1][0]
        res = {"speedup_cpu_interleaved": t_ar / t_blk, "ar_s": round(t_ar, 3), "block_s": round(t_blk, 3),
               "prompts": len(prompts), "reps": reps, "max_new_tokens": max_new_tokens, "threads": threads,
               "by_window": {str(w): {"speedup": t_ar / v[0], "block_s": round(v[0], 3), "tau": v[2] / max(1, v[1]),
                                      "target_calls": v[1]} for w, v in acc.items()}}
        write_json_atomic(res, d / "speed.json")
        out[d.name] = res
    return out
