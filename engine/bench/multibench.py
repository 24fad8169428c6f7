"""Multi-draft / block-verification benchmark: SD, BV, RRS, K-SEQ, SpecTr-GBV (published) and RBV (ours).

For every prompt and temperature the configurations run back to back in a rotated order, next to
autoregressive decoding of the same prompt (every ratio is measured side by side). Metrics, as in
the SpecTr-GBV paper:

    BE (block efficiency)  emitted tokens / target calls, incl. the bonus/correction token
    SR (speedup)           tok/s ÷ tok/s of autoregressive decoding (ratio of means over prompts)
    accepted / call        accepted draft tokens per target call (excl. the bonus)

Configurations are `METHOD:K:L`: METHOD ∈ sd, bv (K = 1 only), rrs, kseq, gbv (= SpecTr-GBV as the
authors' code does it; K = 1 is their "GBV"), rbv and kbv (ours). K > 1 uses `MultiDrafter` (K i.i.d.
blocks) and `TreeTarget` (one target pass over the draft tree).

`--modes` also times one step's components on the first prompt: K-way drafting batched vs
sequential, and the target pass as a token tree vs a batch of K (`--modes-only` skips the grid).

Worked example: `python -m engine multibench --ks 1,3 --ls 8 --temps 0.4 --per-category 1` runs
sd/bv at K = 1 and rrs/kseq/gbv/rbv at K = 1 and 3, γ = 8, T = 0.4, one prompt per Spec-Bench task.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from engine.paths import SPEC_BENCH_DEV

METHODS = {"sd": "token", "bv": "block", "rrs": "rrs", "kseq": "kseq", "gbv": "spectr-gbv-published", "rbv": "rbv",
           "kbv": "kbv"}
LABELS = {"sd": "SD (token)", "bv": "BV (Sun et al.)", "rrs": "RRS", "kseq": "SpecTr K-SEQ",
          "gbv": "SpecTr-GBV (published code)", "rbv": "RBV (ours, lossless)",
          "kbv": "KBV: K-SEQ + BV tail (ours, lossless)"}
# Table 1 averages of the SpecTr-GBV paper (via a secondary summary; project notes §5.2): BE, SR.
PAPER = {"DeepSeek-33B/1.3B": {"sd": (7.64, 1.64), "kseq": (8.39, 1.96), "gbv1": (7.83, 1.67), "gbv": (8.59, 2.12)},
         "DeepSeek-6.7B/1.3B": {"sd": (6.13, 1.05), "kseq": (6.69, 1.11), "gbv1": (6.27, 1.06), "gbv": (6.84, 1.20)}}


@dataclass(frozen=True)
class MultiBenchConfig:
    methods: tuple[str, ...] = tuple(METHODS)  # every verifier of the multi-draft issue
    ks: tuple[int, ...] = (1, 2, 3, 4)  # the paper's K ablation range
    ls: tuple[int, ...] = (4, 8, 12)  # the paper uses L = 8 or 12; 4 is the usual single-draft γ
    temps: tuple[float, ...] = (0.1, 0.4, 0.7)  # the paper's T ablation (T = 0.4 main)
    max_new_tokens: int = 48  # CPU budget: long enough for several verify calls per run
    per_category: int = 1  # one Spec-Bench dev prompt per task (6 prompts)
    limit: int | None = None  # first N of those prompts (None = all)
    seed: int = 0
    tree_mode: str = "tree"  # shared prefixes scored once (measured against batch with --modes)
    draft_mode: str = "auto"  # batched K-way drafting on HF models (measured against sequential)

    def configs(self) -> list[str]:
        out = []
        for L in self.ls:
            for m in self.methods:
                for k in self.ks:
                    if m in ("sd", "bv") and k != 1:
                        continue
                    if m in ("rrs", "kseq") and k == 1 and "sd" in self.methods:
                        continue  # identical to SD at K = 1
                    if m in ("rbv", "kbv") and k == 1 and "bv" in self.methods:
                        continue  # identical to BV at K = 1
                    out.append(f"{m}:{k}:{L}")
        return out


def run_one(spec: str, target, draft, ids: list[int], temp: float, cfg: MultiBenchConfig, eos,
            n: int | None = None, tree_mode: str | None = None, draft_mode: str | None = None) -> dict[str, Any]:
    from engine.decode import DecodeConfig, decode
    from engine.drafters.multi import MultiDraftConfig, MultiDrafter
    from engine.policies.base import parse_policy
    from engine.core.sampling import SamplingConfig
    from engine.core.tree import TreeConfig, TreeTarget

    dc = DecodeConfig(max_new_tokens=n or cfg.max_new_tokens,
                      verifier=METHODS[spec.split(":")[0]] if spec != "ar" else "token",
                      sampling=SamplingConfig(temperature=temp, seed=cfg.seed))
    if spec == "ar":
        tgt, drf, pol = target, None, None
    else:
        m, k, L = spec.split(":")
        k, L = int(k), int(L)
        pol = parse_policy(f"fixed:{L}")
        if k == 1 and m in ("sd", "bv"):
            tgt, drf = target, draft
        else:
            tgt = TreeTarget(target, TreeConfig(tree_mode or cfg.tree_mode))
            drf = MultiDrafter(draft, MultiDraftConfig(k=k, mode=draft_mode or cfg.draft_mode))
    t0 = time.perf_counter()
    out, calls, acc, t_draft, t_verify, t_rule = 0, 0, 0, 0.0, 0.0, 0.0
    for rec in decode(tgt, drf, ids, pol, dc, eos_ids=eos):
        out += rec.emitted
        calls += 1
        acc += rec.accepted
        t_draft += rec.t_draft_ms
        t_verify += rec.t_verify_ms
        t_rule += rec.t_rule_ms
    wall = time.perf_counter() - t0
    return {"config": spec, "temperature": temp, "new_tokens": out, "target_calls": calls, "accepted": acc,
            "wall_s": wall, "t_draft_ms": t_draft, "t_verify_ms": t_verify, "t_rule_ms": t_rule}


def aggregate(runs: list[dict]) -> list[dict]:
    rows = []
    for temp in sorted({r["temperature"] for r in runs}):
        sel = [r for r in runs if r["temperature"] == temp]
        base = statistics.mean(r["new_tokens"] / r["wall_s"] for r in sel if r["config"] == "ar")
        for conf in dict.fromkeys(r["config"] for r in sel):
            rs = [r for r in sel if r["config"] == conf]
            tok, calls = sum(r["new_tokens"] for r in rs), sum(r["target_calls"] for r in rs)
            tps = statistics.mean(r["new_tokens"] / r["wall_s"] for r in rs)
            m, k, L = conf.split(":") if conf != "ar" else ("ar", 1, 0)
            rows.append({"temperature": temp, "config": conf, "method": m, "k": int(k), "L": int(L),
                         "prompts": len(rs), "block_efficiency": tok / calls, "accepted_per_call": sum(
                             r["accepted"] for r in rs) / calls, "tokens_per_s": tps, "speedup": tps / base,
                         "draft_share": sum(r["t_draft_ms"] for r in rs) / max(1e-9, sum(
                             r["t_draft_ms"] + r["t_verify_ms"] for r in rs)),
                         # Per target call: drafting, the verify call (target pass + rule), the rule alone.
                         "draft_ms_per_call": sum(r["t_draft_ms"] for r in rs) / calls,
                         "verify_ms_per_call": sum(r["t_verify_ms"] for r in rs) / calls,
                         "rule_ms_per_call": (sum(r["t_rule_ms"] for r in rs) / calls
                                              if all("t_rule_ms" in r for r in rs) else None)})
    return rows


def _grid_tables(rows: list[dict]) -> list[str]:
    lines: list[str] = []
    temps = sorted({r["temperature"] for r in rows})
    ls = sorted({r["L"] for r in rows if r["L"]})
    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    ks = sorted({r["k"] for r in rows if r["method"] != "ar"})
    for temp in temps:
        lines += [f"\nT = {temp}: BE (emitted per target call, incl. bonus) / SR (speedup vs autoregressive)\n",
                  "| method | K | " + " | ".join(f"L = {L}" for L in ls) + " |", "|---|---|" + "---|" * len(ls)]
        for m in methods:
            for k in ks:
                cells = []
                for L in ls:
                    r = next((r for r in rows if (r["temperature"], r["method"], r["k"], r["L"]) == (temp, m, k, L)), None)
                    cells.append("–" if r is None else f"{r['block_efficiency']:.2f} / {r['speedup']:.2f}×")
                if any(c != "–" for c in cells):
                    lines.append(f"| {LABELS[m]} | {k} | " + " | ".join(cells) + " |")
    for temp in temps:
        lines += [f"\nT = {temp}: per target call, ms — drafting / verify call (target pass + rule) / rule alone "
                  "(– where the run predates rule timing)\n",
                  "| method | K | " + " | ".join(f"L = {L}" for L in ls) + " |", "|---|---|" + "---|" * len(ls)]
        for m in ["ar"] + methods:
            for k in ks if m != "ar" else [1]:
                cells = []
                for L in ls if m != "ar" else [0]:
                    r = next((r for r in rows if (r["temperature"], r["method"], r["k"], r["L"]) == (temp, m, k, L)), None)
                    if r is None or "verify_ms_per_call" not in r:
                        cells.append("–")
                    else:
                        rule = "–" if r.get("rule_ms_per_call") is None else f"{r['rule_ms_per_call']:.1f}"
                        cells.append(f"{r['draft_ms_per_call']:.0f} / {r['verify_ms_per_call']:.0f} / {rule}")
                if any(c != "–" for c in cells):
                    label = "autoregressive" if m == "ar" else LABELS[m]
                    lines.append(f"| {label} | {k} | " + " | ".join(cells) + (" |" if m != "ar" else
                                                                               " |" + " |" * (len(ls) - 1)))
    # Paper-shaped comparison at the paper's main setting (T = 0.4, K = 3, L = 8 or the closest run).
    temp = 0.4 if 0.4 in temps else temps[len(temps) // 2]
    L = 8 if 8 in ls else ls[-1]
    K = 3 if 3 in ks else ks[-1]

    def pick(m, k):
        return next((r for r in rows if (r["temperature"], r["method"], r["k"], r["L"]) == (temp, m, k, L)), None)

    lines += [f"\nPaper-shaped summary (T = {temp}, L = {L}, K = {K}; paper: Table 1 averages, notes §5.2)\n",
              "| method | ours BE | ours SR | " + " | ".join(f"{p} BE | {p} SR" for p in PAPER) + " |",
              "|---|---|---|" + "---|---|" * len(PAPER)]
    for label, m, k, pk in (("SD", "sd", 1, "sd"), ("BV (Sun et al.)", "bv", 1, None), ("SpecTr (K-SEQ)", "kseq", K, "kseq"),
                            ("GBV (published code, K = 1)", "gbv", 1, "gbv1"), ("SpecTr-GBV (published code)", "gbv", K, "gbv"),
                            ("RRS", "rrs", K, None), ("RBV (ours)", "rbv", K, None), ("KBV (ours)", "kbv", K, None)):
        r = pick(m, k)
        ours = f"{r['block_efficiency']:.2f} | {r['speedup']:.2f}×" if r else "– | –"
        paper = " | ".join(f"{PAPER[p][pk][0]:.2f} | {PAPER[p][pk][1]:.2f}×" if pk else "– | –" for p in PAPER)
        lines.append(f"| {label} | {ours} | {paper} |")
    return lines


def merge_results(results: list[dict]) -> dict:
    """One result from several runs of the grid (e.g. one per temperature): runs are concatenated and
    the rows re-aggregated, so every ratio still compares configurations timed side by side."""
    if not results:
        raise ValueError("nothing to merge")
    out = dict(results[0])
    out["runs"] = [r for res in results for r in res.get("runs", [])]
    out["rows"] = aggregate(out["runs"]) if out["runs"] else []
    cfg = dict(out.get("config", {}))
    cfg["temps"] = sorted({t for res in results for t in res.get("config", {}).get("temps", [])})
    out["config"] = cfg
    out["command"] = " ; ".join(res.get("command", "?") for res in results)
    return out


def format_tables(result: dict) -> str:
    if result.get("runs"):  # re-aggregate so older result files get the newer per-call columns
        result = dict(result, rows=aggregate(result["runs"]))
    lines = _grid_tables(result["rows"]) if result["rows"] else []
    if result.get("modes"):
        lines += ["\nOne step's cost, median ms on the first prompt (T = 0.4): K-way drafting batched vs sequential, "
                  "and the target pass as a token tree vs a batch of K (K = 1: one block, one extend)\n",
                  "| L | K | draft batch | draft sequential | target tree | target batch-K | tree nodes |",
                  "|---|---|---|---|---|---|---|"]

        def f(r, key):
            return f"{r[key]:.1f}" if key in r else "–"

        for r in result["modes"]:
            lines.append(f"| {r['L']} | {r['k']} | {f(r, 'draft_batch_ms')} | {f(r, 'draft_sequential_ms')} | "
                         f"{f(r, 'target_tree_ms')} | {f(r, 'target_batch_ms')} | {r.get('tree_nodes', '–')} |")
    return "\n".join(lines)


def measure_modes(target, draft, ids, ks=(2, 3, 4), ls=(4, 8, 12), reps: int = 3, temp: float = 0.4) -> list[dict]:
    """Median ms of one step's drafting (batched vs sequential K-way) and target pass (tree vs batch-K),
    with the K = 1 single-block costs as the reference."""
    from engine.drafters.multi import MultiDraftConfig, MultiDrafter
    from engine.policies.base import parse_policy
    from engine.core.sampling import SamplingConfig
    from engine.core.tree import TreeConfig, TreeTarget

    sc = SamplingConfig(temperature=temp, seed=0)
    out = []

    def med(fn) -> float:
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)

    for L in ls:
        pol = parse_policy(f"fixed:{L}")
        for k in (1,) + tuple(ks):
            row = {"k": k, "L": L}
            blocks = None
            for mode in ("batch", "sequential") if k > 1 else ("sequential",):
                d = MultiDrafter(draft, MultiDraftConfig(k=k, mode=mode))
                d.reset(ids)
                gen = torch.Generator().manual_seed(0)

                def step():
                    nonlocal blocks
                    blocks = d.propose(ids, L, pol, sc, gen).tokens
                    d.commit(len(ids) - 1, 0)

                row[f"draft_{mode}_ms"] = med(step)
            for mode in ("tree", "batch") if k > 1 else ("tree",):
                tt = TreeTarget(target, TreeConfig(mode))
                tt.reset()
                tt.extend(ids[:-1])

                def score():
                    if k == 1:
                        tt.extend([ids[-1]] + blocks[0])
                        tt.crop(len(ids) - 1)
                    else:
                        tt.score_tree(ids[-1], blocks)
                        tt.commit_tree(0, 0)
                        tt.crop(len(ids) - 1)

                row[f"target_{mode}_ms"] = med(score)
                row["tree_nodes"] = len({tuple(b[:i]) for b in blocks for i in range(1, len(b) + 1)})
            out.append(row)
    return out


def run_multibench(target, draft, tokenizer, prompts_file, cfg: MultiBenchConfig, eos=(), modes=False,
                   progress=True, checkpoint=None) -> dict:
    """Every configuration × temperature on every prompt; `checkpoint(partial_result)` after each prompt."""
    from tqdm import tqdm

    from engine.trace.prompts import encode, load_prompts, task_of

    prompts = load_prompts(prompts_file, limit=cfg.limit, per_category=cfg.per_category)
    encoded = [(p, encode(tokenizer, p.text)) for p in prompts]
    configs = ["ar"] + cfg.configs()
    runs: list[dict] = []
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")

    def result_of(done: list) -> dict:
        return {"created": created, "target": target.name, "draft": draft.name,
                "dtype": str(target.dtype).replace("torch.", ""),
                "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.__dict__.items()},
                "prompts": [{"question_id": p.question_id, "category": p.category} for p, _ in done],
                "rows": aggregate(runs) if runs else [], "runs": list(runs)}

    bar = tqdm(total=len(configs) * len(cfg.temps) * len(encoded), unit="run", disable=not progress, desc="multibench")
    for spec in configs[:4]:  # warm-up (untimed)
        run_one(spec, target, draft, encoded[0][1], cfg.temps[0], cfg, eos, n=8)
    for i, (p, ids) in enumerate(encoded):
        for temp in cfg.temps:
            order = configs[i % len(configs):] + configs[: i % len(configs)]
            for spec in order:
                r = run_one(spec, target, draft, ids, temp, cfg, eos)
                r.update(task=task_of(p.category), question_id=p.question_id)
                runs.append(r)
                bar.update(1)
        if checkpoint is not None:
            checkpoint(result_of(encoded[: i + 1]))
    bar.close()
    result = result_of(encoded)
    if modes:
        result["modes"] = measure_modes(target, draft, encoded[0][1], ks=tuple(k for k in cfg.ks if k > 1) or (2,),
                                        ls=cfg.ls)
    return result


def append_markdown(result: dict, path: Path, command: str, machine: str) -> None:
    import platform

    import transformers

    c = result["config"]
    head = (f"\n## {result['created'][:10]} — multi-draft and block verification: `{result['target']}` + "
            f"`{result['draft']}` ({result['dtype']})\n\n- command: `{command}`\n- machine: {machine}; Python "
            f"{platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
            f"{torch.get_num_threads()} threads\n- Spec-Bench dev subset: {len(result['prompts'])} prompts "
            f"({c['per_category']} per task, question ids {', '.join(str(p['question_id']) for p in result['prompts'])}), "
            f"{c['max_new_tokens']} new tokens max; grid K ∈ {c['ks']}, L ∈ {c['ls']}, T ∈ {c['temps']}; "
            f"configurations interleaved per prompt with autoregressive decoding\n"
            f"- SpecTr-GBV (published code) is NOT lossless for K ≥ 2 (docs/audit.md): its BE/SR are not those of "
            f"a valid sampler\n")
    with open(path, "a", encoding="utf-8") as f:
        f.write(head + format_tables(result) + "\n")


def add_parser(sub) -> None:
    d = MultiBenchConfig()
    p = sub.add_parser("multibench", help="benchmark SD, BV, RRS, K-SEQ, SpecTr-GBV and RBV over K, L, T")
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--draft", default="smollm2-draft")
    p.add_argument("--prompts", default=str(SPEC_BENCH_DEV))
    p.add_argument("--per-category", type=int, default=d.per_category)
    p.add_argument("--limit", type=int, default=None, help="first N prompts of the per-task selection")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--methods", default=",".join(d.methods))
    p.add_argument("--ks", default=",".join(map(str, d.ks)))
    p.add_argument("--ls", default=",".join(map(str, d.ls)))
    p.add_argument("--temps", default=",".join(map(str, d.temps)))
    p.add_argument("--tree-mode", default=d.tree_mode, choices=("tree", "batch"))
    p.add_argument("--draft-mode", default=d.draft_mode, choices=("auto", "batch", "sequential"))
    p.add_argument("--modes", action="store_true", help="also time batched/sequential drafting × tree/batch scoring")
    p.add_argument("--modes-only", action="store_true", help="only the component timings (no decoding grid)")
    p.add_argument("--dtype", default="auto", help="auto = bf16 where native (CUDA, avx512_bf16), else fp32")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default="docs/results/multibench.json")
    p.add_argument("--markdown", default=None, help="append a dated section to this file (e.g. docs/benchmarks.md)")
    p.add_argument("--machine", default="2-core x86-64 CPU, no GPU")
    p.add_argument("--from-json", default=None, help="render (and --markdown append) an earlier or partial result; "
                   "comma-separated files are merged (e.g. one per temperature)")
    p.set_defaults(func=cmd_multibench)


def cmd_multibench(a) -> int:
    import sys

    from engine.core.load import check_pair, eos_token_ids, load_model

    if a.from_json:
        result = merge_results([json.loads(Path(f).read_text()) for f in a.from_json.split(",")])
        print(format_tables(result))
        if a.markdown:
            append_markdown(result, Path(a.markdown), result.get("command", "?"), a.machine)
        return 0
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = MultiBenchConfig(methods=tuple(m.strip() for m in a.methods.split(",")),
                           ks=tuple(int(x) for x in a.ks.split(",")), ls=tuple(int(x) for x in a.ls.split(",")),
                           temps=tuple(float(x) for x in a.temps.split(",")), max_new_tokens=a.max_new_tokens,
                           per_category=a.per_category, limit=a.limit, tree_mode=a.tree_mode, draft_mode=a.draft_mode)
    unknown = set(cfg.methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown method(s) {sorted(unknown)}; choose from {', '.join(METHODS)}")
    if any(t <= 0 for t in cfg.temps):
        raise ValueError("multi-draft benchmarks need T > 0 (K greedy drafts are identical)")
    target = load_model(a.target, a.dtype, a.device, role="target")
    draft = load_model(a.draft, a.dtype, a.device, role="draft", target=target)
    check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
    command = " ".join(["python -m engine", *sys.argv[1:]])

    def save(result: dict) -> None:
        if a.out:
            from engine.trace.jsonio import write_json_atomic

            result["command"] = command
            write_json_atomic(result, a.out)

    if a.modes_only:
        from engine.trace.prompts import encode, load_prompts

        p0 = load_prompts(a.prompts, limit=1, per_category=cfg.per_category)[0]
        ids = encode(target.tokenizer, p0.text)
        measure_modes(target.lm, draft.lm, ids, ks=(2,), ls=(4,), reps=1)  # warm-up
        result = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "target": target.lm.name,
                  "draft": draft.lm.name, "dtype": str(target.lm.dtype).replace("torch.", ""),
                  "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.__dict__.items()},
                  "prompts": [{"question_id": p0.question_id, "category": p0.category}], "rows": [],
                  "modes": measure_modes(target.lm, draft.lm, ids, ks=tuple(k for k in cfg.ks if k > 1) or (2,),
                                         ls=cfg.ls)}
        save(result)
        print(format_tables(result))
        return 0
    result = run_multibench(target.lm, draft.lm, target.tokenizer, a.prompts, cfg, eos=eos_token_ids(target),
                            modes=a.modes, checkpoint=save)
    save(result)
    result["command"] = command
    print(format_tables(result))
    if a.markdown:
        append_markdown(result, Path(a.markdown), command, a.machine)
    return 0
