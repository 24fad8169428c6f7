"""Multi-draft / block-verification benchmark: token, block, RRS, K-SEQ, SpecTr-GBV (published) and RBV
/ KBV (ours), each named as in engine.verify.VERIFIERS.

For every prompt and temperature the configurations run back to back in a rotated order, next to
autoregressive decoding of the same prompt (every ratio is measured side by side). Metrics (names:
engine.metrics):

    mean_emitted_per_call_incl_bonus   emitted tokens / target calls, incl. the bonus/correction token:
                                       the SpecTr-GBV paper's BE (block efficiency)
    speedup                            tok/s ÷ tok/s of autoregressive decoding (ratio of means over
                                       prompts): the paper's SR
    mean_accepted_per_call_excl_bonus  accepted draft tokens per target call

Configurations are `VERIFIER:K:L`: VERIFIER ∈ token, block (K = 1 only), rrs, kseq,
spectr-gbv-published (the authors' code; K = 1 is their "GBV"), rbv and kbv (ours); the old short
names sd, bv, gbv are read as aliases (result files written before). K > 1 uses `MultiDrafter` (K
i.i.d. blocks) and `TreeTarget` (one target pass over the draft tree).

`measure_modes` times one step's components on the first prompt: K-way drafting batched vs
sequential, and the target pass as a token tree vs a batch of K. Tables: engine.bench.multibench_report;
CLI: engine/cli/multibench.py.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import torch

from engine.core.lm import prefill
from engine.measure import median_ms, sync
from engine.metrics import ACCEPTED_PER_CALL, EMITTED_PER_CALL, rates

METHODS = ("token", "block", "rrs", "kseq", "spectr-gbv-published", "rbv", "kbv")  # engine.verify.VERIFIERS names
SINGLE = ("token", "block")  # K = 1 only
ALIASES = {"sd": "token", "bv": "block", "gbv": "spectr-gbv-published"}  # the names of older result files


def method_of(name: str) -> str:
    """A verifier name (or an old alias) → its engine.verify.VERIFIERS name."""
    return ALIASES.get(name, name)


@dataclass(frozen=True)
class MultiBenchConfig:
    methods: tuple[str, ...] = METHODS  # every verifier of the multi-draft issue
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
                    if m in SINGLE and k != 1:
                        continue
                    if m in ("rrs", "kseq") and k == 1 and "token" in self.methods:
                        continue  # identical to token verification at K = 1
                    if m in ("rbv", "kbv") and k == 1 and "block" in self.methods:
                        continue  # identical to block verification at K = 1
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
                      verifier=method_of(spec.split(":")[0]) if spec != "ar" else "token",
                      sampling=SamplingConfig(temperature=temp, seed=cfg.seed))
    if spec == "ar":
        tgt, drf, pol = target, None, None
    else:
        m, k, L = spec.split(":")
        k, L = int(k), int(L)
        pol = parse_policy(f"fixed:{L}")
        if k == 1 and method_of(m) in SINGLE:
            tgt, drf = target, draft
        else:
            tgt = TreeTarget(target, TreeConfig(tree_mode or cfg.tree_mode))
            drf = MultiDrafter(draft, MultiDraftConfig(k=k, mode=draft_mode or cfg.draft_mode))
    sync(target)
    t0 = time.perf_counter()
    out, calls, acc, t_draft, t_verify, t_rule = 0, 0, 0, 0.0, 0.0, 0.0
    for rec in decode(tgt, drf, ids, pol, dc, eos_ids=eos):
        out += rec.emitted
        calls += 1
        acc += rec.accepted
        t_draft += rec.t_draft_ms
        t_verify += rec.t_verify_ms
        t_rule += rec.t_rule_ms
    sync(target)  # the last step's kernels are part of the wall time
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
            r_ = rates(tok, calls, sum(r["accepted"] for r in rs), None)
            rows.append({"temperature": temp, "config": conf, "method": method_of(m), "k": int(k), "L": int(L),
                         "prompts": len(rs), EMITTED_PER_CALL: r_[EMITTED_PER_CALL],
                         ACCEPTED_PER_CALL: r_[ACCEPTED_PER_CALL], "tokens_per_s": tps, "speedup": tps / base,
                         "draft_share": sum(r["t_draft_ms"] for r in rs) / max(1e-9, sum(
                             r["t_draft_ms"] + r["t_verify_ms"] for r in rs)),
                         # Per target call: drafting, the verify call (target pass + rule), the rule alone.
                         "draft_ms_per_call": sum(r["t_draft_ms"] for r in rs) / calls,
                         "verify_ms_per_call": sum(r["t_verify_ms"] for r in rs) / calls,
                         "rule_ms_per_call": (sum(r["t_rule_ms"] for r in rs) / calls
                                              if all("t_rule_ms" in r for r in rs) else None)})
    return rows


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


def measure_modes(target, draft, ids, ks=(2, 3, 4), ls=(4, 8, 12), reps: int = 3, temp: float = 0.4) -> list[dict]:
    """Median ms of one step's drafting (batched vs sequential K-way) and target pass (tree vs batch-K),
    with the K = 1 single-block costs as the reference."""
    from engine.drafters.multi import MultiDraftConfig, MultiDrafter
    from engine.drafters.base import KEEP_ALL
    from engine.core.sampling import SamplingConfig
    from engine.core.tree import TreeConfig, TreeTarget

    sc = SamplingConfig(temperature=temp, seed=0)
    out = []

    def med(fn) -> float:  # device-synchronised (engine.measure); the caller runs a warm-up grid first
        return median_ms(fn, repeats=reps, warmup=0, device=target)

    for L in ls:
        for k in (1,) + tuple(ks):
            row = {"k": k, "L": L}
            blocks = None
            for mode in ("batch", "sequential") if k > 1 else ("sequential",):
                d = MultiDrafter(draft, MultiDraftConfig(k=k, mode=mode))
                d.reset(ids)
                gen = torch.Generator().manual_seed(0)

                def step():
                    nonlocal blocks
                    blocks = d.draft(ids, L, KEEP_ALL, sc, gen).tokens
                    d.commit(len(ids) - 1, 0)

                row[f"draft_{mode}_ms"] = med(step)
            for mode in ("tree", "batch") if k > 1 else ("tree",):
                tt = TreeTarget(target, TreeConfig(mode))
                tt.reset()
                prefill(tt, ids[:-1])

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


def interleaved(encoded, temps, plan: list[str], run, runs: list[dict], bar, after_prompt=None) -> None:
    """Every spec of `plan` at every temperature on every (prompt, ids), appended to `runs` with the task
    and question id. The order rotates by one per prompt, so no configuration always runs first (or right
    after a cold cache); `after_prompt(encoded[:i + 1])` after each prompt (checkpoints)."""
    from engine.trace.prompts import task_of

    for i, (p, ids) in enumerate(encoded):
        for temp in temps:
            for spec in plan[i % len(plan):] + plan[: i % len(plan)]:
                r = run(spec, ids, temp)
                r.update(task=task_of(p.category), question_id=p.question_id)
                runs.append(r)
                bar.update(1)
        if after_prompt is not None:
            after_prompt(encoded[: i + 1])


def run_multibench(target, draft, tokenizer, prompts_file, cfg: MultiBenchConfig, eos=(), modes=False,
                   progress=True, checkpoint=None) -> dict:
    """Every configuration × temperature on every prompt; `checkpoint(partial_result)` after each prompt."""
    from tqdm import tqdm

    from engine.trace.prompts import encode, load_prompts

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
    interleaved(encoded, cfg.temps, configs, lambda spec, ids, temp: run_one(spec, target, draft, ids, temp, cfg, eos),
                runs, bar, None if checkpoint is None else lambda done: checkpoint(result_of(done)))
    bar.close()
    result = result_of(encoded)
    if modes:
        result["modes"] = measure_modes(target, draft, encoded[0][1], ks=tuple(k for k in cfg.ks if k > 1) or (2,),
                                        ls=cfg.ls)
    return result
