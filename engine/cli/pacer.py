"""`python -m engine pacer ...`: PACER data, training, offline sweep and benchmark (argparse lives here).

    pacer data    simulated decoding with a fixed window on ShareGPT prompts → safetensors shards
    pacer train   train M_B (BCE), export weights + model card
    pacer sweep   replay b / t₀ / ρ and the baselines over held-out steps (engine.offline.pacer_sweep)
    pacer eval    M_B AUC/ECE on held-out data; M_B's share of decode time in traces
    pacer bench   engine.bench.bench.run_bench with PACER configs (draft loaded with hidden states)

Importing this module registers the `pacer` policy (engine.policies.pacer), so `decode --policy pacer:...`
works from the CLI.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from engine.cli import common
from engine.paths import REPO_ROOT, SPEC_BENCH_DEV
from engine.trace.parse import read_jsonl
import engine.policies.pacer  # noqa: F401  (registers the policy)



def _load_pair(a):
    import torch

    from engine.models.load import check_pair, eos_token_ids, load_model

    if a.threads:
        torch.set_num_threads(a.threads)
    target = load_model(a.target, a.dtype, a.device, role="target")
    draft = load_model(a.draft, a.dtype, a.device, role="draft", target=target, want_hidden=True)
    check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
    return target, draft, eos_token_ids(target)


def measure_verify(target, ids: list[int], kmax: int = 17, reps: int = 5) -> list[float]:
    """Median ms of a k-token target forward on a warm cache, k = 1..kmax."""
    from engine.measure import forward_curve

    curve = forward_curve(target, ids, range(1, kmax + 1), reps)
    return [curve[k] for k in range(1, kmax + 1)]


def measure_loop_costs(target, draft, tok, eos, window: int = 16) -> dict:
    """t_d from real fixed-window decode steps (draft ms per drafted token, loop overhead included)
    and t_v(k), k = 1..window+1, on a warm cache — under the current thread/load conditions."""
    from engine.decode import DecodeConfig, decode
    from engine.policies.simple import Fixed
    from engine.trace.prompts import encode

    ids = encode(tok, "Explain how a hash map works, with an example.")
    per_tok = [r.t_draft_ms / r.window for r in decode(target, draft, ids, Fixed(window), DecodeConfig(64), eos)
               if r.window == window]
    return {"t_draft_ms": statistics.median(per_tok) if per_tok else float("nan"),
            "t_verify_ms": measure_verify(target, ids, window + 1)}


def cmd_data(a) -> int:
    from engine.trace.prompts import encode
    from engine.train.pacer.data import PacerDataConfig, generate

    cfg = PacerDataConfig(out_dir=a.out_dir, n_train=a.n_train, n_heldout=a.n_heldout, window=a.window,
                          max_new_tokens=a.max_new_tokens,
                          temperatures=tuple(float(t) for t in a.temperatures.split(",")), seed=a.seed)
    target, draft, eos = _load_pair(a)
    costs = None
    if a.split in ("all", "heldout"):  # the sweep's cost model: measured once, by the held-out process
        ids = encode(target.tokenizer, "Explain how a hash map works, with an example.")
        costs = {"t_verify_ms": measure_verify(target.lm, ids, cfg.window + 1)}
    splits = ("heldout", "train") if a.split == "all" else (a.split,)
    out = generate(cfg, target.lm, draft.lm, target.tokenizer, eos, costs, splits)
    man = out / "manifest.json"
    m = json.loads(man.read_text())
    m["command"] = " ".join(["python -m engine", *sys.argv[1:]])
    man.write_text(json.dumps(m, indent=1))
    print(f"wrote shards to {out}")
    return 0


def cmd_train(a) -> int:
    from engine.config import dataclass_from_args
    from engine.offline.steps import default_data_dir
    from engine.train.pacer.fit import PacerTrainConfig, train, write_card

    cfg = dataclass_from_args(PacerTrainConfig, a)
    s = train(cfg)
    ho = s["heldout"]
    print(f"held-out AUC {ho['auc']:.4f}  ECE {ho['ece']:.4f}  BCE {ho['bce']:.4f}  ({s['params']} params, "
          f"best step {s['best_step']}, {s['wall_s']:.0f} s) → {cfg.out}")
    if a.card:
        man = Path(cfg.data_dir or default_data_dir()) / "manifest.json"
        write_card(s, a.card, " ".join(["python -m engine", *sys.argv[1:]]),
                   json.loads(man.read_text()) if man.exists() else {})
    return 0


def _in_repo(path: str) -> str:
    """Results name committed weights by their repository path, never by this machine's absolute one."""
    root = REPO_ROOT
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)


def _variants(specs: list[str]) -> dict[str, str]:
    out = {}
    for v in specs or []:
        tag, eq, path = v.partition("=")
        if not eq or not tag or not path:
            raise ValueError(f"--variant expects TAG=PATH, got {v!r}")
        out[tag] = path
    return out


def cmd_sweep(a) -> int:
    import torch

    from engine.offline import pacer_sweep as sim
    from engine.offline.costmodel import CostModel
    from engine.offline.steps import default_data_dir, load_split, score_models, steps_from
    from engine.policies.pacer import load_weights

    if a.threads:
        torch.set_num_threads(a.threads)
    ho = load_split(a.data_dir, "heldout")
    models = {"main": load_weights(a.weights)[0]}
    models.update({t: load_weights(p)[0] for t, p in _variants(a.variant).items()})
    man = json.loads((Path(a.data_dir or default_data_dir()) / "manifest.json").read_text())
    full = ho.window == int(ho.window.max())
    t_d, t_v = float(torch.median(ho.t_draft_ms[full] / ho.window[full])), man["costs"]["t_verify_ms"]
    if a.measure:  # re-measure on the pair under the benchmark's own conditions
        target, draft, eos = _load_pair(a)
        m = measure_loop_costs(target.lm, draft.lm, target.tokenizer, eos, len(t_v) - 1)
        t_d, t_v = m["t_draft_ms"], m["t_verify_ms"]
    t_mb = sim.measure_mb_ms(models["main"], int(ho.hidden.shape[1]))
    costs = CostModel.from_ms(t_d, t_v, t_mb)
    steps = steps_from(ho, score_models(ho, models))
    res: dict = {"costs": {"t_draft": t_d, "t_verify": list(t_v), "t_mb": t_mb},  # ms, as measured
                 "variants": {t: _in_repo(v) for t, v in _variants(a.variant).items()},
                 "weights": _in_repo(a.weights), "splits": {}}
    for name, sel in (("all", steps), ("greedy", [s for s in steps if s.temperature == 0]),
                      ("sampled", [s for s in steps if s.temperature > 0])):
        if not sel:
            continue
        # Under sampling only PACER's b = 1 trim is replayed (exact there: it decides before the token
        # is drawn); b > 1 trim is refused by the decoder, and confidence's trim verifies against a
        # corrected law the recording did not use.
        greedy = name == "greedy"
        grid = sim.sweep(sel, costs, sampled=not greedy)
        base = {k: v for k, v in sim.baselines(sel, costs).items() if greedy or "trim=1" not in k}
        r = {"steps": len(sel), "sweep": grid, "baselines": base, "ablations": {}}
        best = grid[0]
        r["ablations"]["pacer (best)"] = best
        for b in (1, 2, 4):
            r["ablations"][f"b={b} (best t, rho)"] = next(x for x in grid if x["b"] == b)
        r["ablations"]["rho=1 (best b, t)"] = next(x for x in grid if x["rho"] == 1.0)
        r["ablations"]["trim=0 (best b, t, rho)"] = next(x for x in grid if not x["trim"])
        r["ablations"]["trim=1 (best b, t, rho)"] = next(x for x in grid if x["trim"])
        r["ceiling"] = sim.ceiling(sel, costs, sampled=not greedy)
        # What-if: the same steps on a cost profile where a k-token verify costs one forward (GPU-like).
        r["what_if_flat"] = [dict(c=c, **sim.ceiling(sel, CostModel.from_ms(c * t_v[0], (t_v[0],) * len(t_v), t_mb),
                                                    factors=(1.0,), sampled=not greedy)[0])
                             for c in (a.what_if_c or [])]
        for tag in models:
            if tag != "main":
                g = sim.sweep(sel, costs, tag=tag, sampled=not greedy)
                r["ablations"][f"{tag} (best)"] = g[0]
                same = best["b"], best["t"], best["rho"], best["trim"]
                r["ablations"][f"{tag} (at main's best b, t, rho)"] = next(
                    x for x in g if (x["b"], x["t"], x["rho"], x["trim"]) == same)
        res["splits"][name] = r
    text = format_sweep(res)
    print(text)
    if a.out:
        _atomic_json(res, Path(a.out))
    if a.markdown:
        with open(a.markdown, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


def format_sweep(res: dict) -> str:
    c = res["costs"]
    lines = [f"\nCosts: t_d = {c['t_draft']:.2f} ms/draft token, t_v(1) = {c['t_verify'][0]:.2f} ms, "
             f"t_v(17) = {c['t_verify'][-1]:.2f} ms, M_B call = {c['t_mb']:.2f} ms. Replay of held-out steps, "
             "steps independent (engine/offline/pacer_sweep.py).\n"]
    for name, r in res["splits"].items():
        lines.append(f"\n**{name}** ({r['steps']} held-out steps)\n")
        lines.append("| policy | sim. speedup vs AR | emitted/call (incl. bonus) | mean window | wasted/call |")
        lines.append("|---|---|---|---|---|")
        rows = [(k, v) for k, v in r["ablations"].items()] + list(r["baselines"].items())
        for k, v in rows:
            label = k if "b" not in v else (f"{k}: pacer b={v['b']},t={v['t']},rho={v['rho']}"
                                            + (",trim=1" if v.get("trim") else ""))
            lines.append(f"| {label} | {v['speedup']:.3f}× | {v['mean_emitted_per_call_incl_bonus']:.2f} | {v['mean_window']:.2f} | "
                         f"{v['wasted_per_call']:.2f} |")
        if r.get("ceiling"):
            lines += _ceiling_table(f"PACER vs the oracle as the draft gets cheaper ({name}; t_d scaled by f)",
                                    "f", "draft_cost_factor", r["ceiling"])
        if r.get("what_if_flat"):
            lines += _ceiling_table(f"What-if ({name}): flat verify cost t_v(k) = t_v(1), t_d = c·t_v(1)",
                                    "c", "c", r["what_if_flat"])
    return "\n".join(lines)


def _ceiling_table(title: str, key_name: str, key: str, rows: list[dict]) -> list[str]:
    """Rows of `engine.offline.pacer_sweep.ceiling`: oracle, perfect M_B, best PACER, best fixed and their ratios."""
    out = [f"\n{title}\n",
           f"| {key_name} | t_d ms | oracle | perfect M_B | best PACER (rule) | best fixed (γ) | perfect/oracle | "
           "PACER/oracle | PACER/fixed |", "|---|---|---|---|---|---|---|---|---|"]
    for c in rows:
        rule = c["pacer_best_rule"]
        out.append(f"| {c[key]:g} | {c['t_draft_ms']:.1f} | {c['oracle']:.3f}× | {c['perfect_preverifier']:.3f}× | "
                   f"{c['pacer_best']:.3f}× (b={rule['b']},t={rule['t']},rho={rule['rho']}"
                   f"{',trim=1' if rule['trim'] else ''}) | {c['fixed_best']:.3f}× ({c['fixed_best_gamma']}) | "
                   f"{c['perfect_over_oracle']:.0%} | {c['pacer_over_oracle']:.0%} | {c['pacer_over_fixed']:.2f}× |")
    return out


def _atomic_json(obj, path: Path) -> None:
    from engine.trace.jsonio import write_json_atomic

    write_json_atomic(obj, path)


def _variant_class(tag: str, path: str):
    from engine.policies.pacer import Pacer

    class Variant(Pacer):
        name = f"pacer-{tag}"

        def __init__(self, weights: str | None = None, **kw) -> None:
            super().__init__(weights=weights or path, **kw)

    return Variant


def _question_ids(path: Path, prompts) -> list:
    """The selected prompts' question_id as the file spells it (None where a line has none), in order:
    the selection itself is load_prompts'; this only reads back the raw field."""
    raw = read_jsonl(path)  # the one JSONL reader
    out, i = [], 0
    for p in prompts:
        while i < len(raw) and ((raw[i].get("turns") or [raw[i].get("prompt")])[0] != p.text
                                or str(raw[i].get("category", "")) != p.category):
            i += 1
        out.append(raw[i].get("question_id") if i < len(raw) else None)
        i += 1
    return out


def cmd_bench(a) -> int:
    from engine.bench.bench import BenchConfig, append_markdown, check_configs, format_table, run_bench
    from engine.cli.checks import split_specs
    from engine.policies.base import PACER_KEYS, register_policy

    for tag, path in _variants(a.variant).items():
        register_policy(f"pacer-{tag}", _variant_class(tag, path), "threshold", PACER_KEYS)
    # per_category: the first --per-task prompts of each Spec-Bench task, in file order (load_prompts)
    cfg = BenchConfig(configs=tuple(split_specs(a.configs)), temperatures=common.floats(a.temperatures, "--temperatures"),
                      max_new_tokens=a.max_new_tokens, per_category=a.per_task, warmup=a.warmup)
    check_configs(cfg)  # every configuration × temperature (engine.spec.RunSpec.check), before any load
    from engine.trace.prompts import load_prompts

    qids = _question_ids(Path(a.prompts), load_prompts(a.prompts, per_category=a.per_task))
    target, draft, eos = _load_pair(a)
    result = run_bench(target.lm, draft.lm, target.tokenizer, a.prompts, cfg, eos=eos)
    command = " ".join(["python -m engine", *sys.argv[1:]])
    result.update(command=command, question_ids=qids, variants=_variants(a.variant))
    print(format_table(result))
    if a.out:
        _atomic_json(result, Path(a.out))
    if a.markdown:
        append_markdown(result, Path(a.markdown), command, a.machine)
    return 0


def cmd_eval(a) -> int:
    """Held-out quality of M_B weights on a data directory, and M_B's share of decode time in traces."""
    import dataclasses

    from engine.policies.pacer import load_weights
    from engine.offline.steps import load_split
    from engine.train.pacer.fit import evaluate
    from engine.trace.format import load_trace

    res: dict = {"weights": {}, "traces": {}}
    if a.weights:
        data = load_split(a.data_dir, "heldout")
        if a.token_q:  # the input M_B read before max q: the drafted token's own q(x_i)
            data = dataclasses.replace(data, qmax=None)
        for w in a.weights:
            r = evaluate(load_weights(w)[0], data)
            f = r["first_rejection_view"]
            res["weights"][_in_repo(w)] = r
            temps = "  ".join(f"T={t}: AUC {v['auc']:.3f}" for t, v in r["by_temperature"].items())
            print(f"{_in_repo(w)}: AUC {r['auc']:.3f}  ECE {r['ece']:.4f}  ({temps})  first-rejection view: "
                  f"AUC {f['auc']:.3f} (q {f['auc_q']:.3f}, Πq {f['auc_cumprod_q']:.3f})")
    for path in a.traces or []:
        t = load_trace(path)
        pf = [s.get("policy_fields") or {} for s in t.steps]
        mb = sum(f.get("mb_ms", 0.0) for f in pf)
        decode_ms = sum(s["t_draft_ms"] + s["t_verify_ms"] for s in t.steps)
        stops: dict = {}
        for f in pf:
            stops[str(f.get("stop"))] = stops.get(str(f.get("stop")), 0) + 1
        res["traces"][str(path)] = {"mb_ms": mb, "decode_ms": decode_ms, "mb_share": mb / max(decode_ms, 1e-9),
                                    "steps": len(t.steps), "dropped": sum(f.get("dropped", 0) for f in pf),
                                    "stops": stops}
        r = res["traces"][str(path)]
        print(f"{path}: M_B {mb:.0f} ms = {r['mb_share']:.2%} of decode time; {r['steps']} steps, "
              f"{r['dropped']} drafts dropped; stops {stops}")
    if a.out:
        _atomic_json(res, Path(a.out))
    return 0


def cmd_calibrate(a) -> int:
    """PACER on a new pair in one command: data → M_B → swept defaults, each step the subcommand's own."""
    import re

    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", a.name):
        raise ValueError(f"--name {a.name!r}: use lower-case letters, digits, '.', '_' or '-' (it names files)")
    pair = ["--target", a.target, "--draft", a.draft, "--dtype", a.dtype, "--device", a.device]
    pair += ["--threads", str(a.threads)] if a.threads else []
    data = a.data_dir or str(Path(os.environ.get("SPECLAB_CACHE", Path.home() / ".cache" / "speclab"))
                             / f"pacer-data-{a.name}")
    weights = f"models/pacer-{a.name}/pacer.safetensors"
    ap = _pacer_parser()
    for argv in (["data", *pair, "--n-train", "32", "--n-heldout", "16", "--window", "12", "--max-new-tokens", "96",
                  "--out-dir", data],
                 ["train", "--data-dir", data, "--steps", "400", "--eval-every", "25", "--out", weights,
                  "--card", f"models/pacer-{a.name}/README.md"],
                 ["sweep", "--data-dir", data, "--weights", weights, *pair, "--measure",
                  "--out", f"docs/results/pacer-sweep-{a.name}.json"]):
        print("pacer " + " ".join(argv), flush=True)
        step = ap.parse_args(argv)
        if step.func(step):
            return 1
    return 0


def _pacer_parser():
    import argparse

    sub = argparse.ArgumentParser(prog="python -m engine").add_subparsers(dest="cmd", required=True)
    add_parser(sub)
    return sub.choices["pacer"]


def _pair_args(p) -> None:
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--draft", default="smollm2-draft")
    p.add_argument("--dtype", default="auto", help="auto = bf16 where native (CUDA, avx512_bf16), else fp32")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)


def add_parser(sub) -> None:
    from engine.config import add_dataclass_args
    from engine.train.pacer.fit import PacerTrainConfig
    from engine.train.pacer.data import PacerDataConfig

    p = sub.add_parser("pacer", help="PACER pre-verifier: data, train, sweep, bench")
    ps = p.add_subparsers(dest="pacer_cmd", required=True)
    d = ps.add_parser("data", help="simulated decoding on ShareGPT prompts → training shards")
    _pair_args(d)
    d.add_argument("--out-dir", default="")
    d.add_argument("--split", default="all", choices=["all", "heldout", "train"],
                   help="generate one split only (run two single-thread processes side by side)")
    for k in ("n_train", "n_heldout", "window", "max_new_tokens", "seed"):
        d.add_argument("--" + k.replace("_", "-"), type=int, default=getattr(PacerDataConfig, k))
    d.add_argument("--temperatures", default=",".join(str(t) for t in PacerDataConfig.temperatures))
    d.set_defaults(func=cmd_data)
    t = ps.add_parser("train", help="train M_B and export safetensors weights")
    add_dataclass_args(t, PacerTrainConfig)
    t.add_argument("--card", default=None, help="write a model card (markdown) here")
    t.set_defaults(func=cmd_train)
    s = ps.add_parser("sweep", help="offline replay of b/t/rho and baselines on held-out steps")
    s.add_argument("--data-dir", default="")
    s.add_argument("--weights", default=str(engine.policies.pacer.DEFAULT_WEIGHTS))
    s.add_argument("--variant", action="append", help="TAG=PATH: another M_B to compare (e.g. nope=...)")
    s.add_argument("--measure", action="store_true", help="re-measure t_d, t_v on the pair (else: the recording's)")
    s.add_argument("--what-if-c", type=float, action="append", default=None,
                   help="also replay on a flat verify cost t_v(k) = t_v(1) with t_d = C·t_v(1) (GPU-like; repeatable)")
    _pair_args(s)
    s.add_argument("--out", default=None)
    s.add_argument("--markdown", default=None)
    s.set_defaults(func=cmd_sweep)
    e = ps.add_parser("eval", help="M_B quality on held-out data; M_B's share of decode time in traces")
    e.add_argument("--data-dir", default="")
    e.add_argument("--weights", action="append", help="M_B weights to evaluate (repeatable)")
    e.add_argument("--token-q", action="store_true", help="feed the drafted token's q(x_i) instead of max q")
    e.add_argument("--traces", nargs="*", help="PACER decode traces: M_B time share, stop reasons, drops")
    e.add_argument("--out", default=None)
    e.set_defaults(func=cmd_eval)
    b = ps.add_parser("bench", help="interleaved benchmark incl. PACER (configs separated by ';')")
    _pair_args(b)
    b.add_argument("--prompts", default=str(SPEC_BENCH_DEV))
    b.add_argument("--per-task", type=int, default=2)
    b.add_argument("--configs", default="ar;fixed:4;heuristic;confidence;pacer")
    b.add_argument("--variant", action="append", help="TAG=PATH registers policy pacer-TAG with those weights")
    b.add_argument("--temperatures", default="0,0.7")
    b.add_argument("--max-new-tokens", type=int, default=64)
    b.add_argument("--warmup", type=int, default=1)
    b.add_argument("--out", default=None)
    b.add_argument("--markdown", default=None)
    b.add_argument("--machine", default="2-core x86-64 CPU, no GPU")
    b.set_defaults(func=cmd_bench)
    c = ps.add_parser("calibrate", help="PACER for a new pair: data, M_B and swept defaults in one command")
    _pair_args(c)
    c.add_argument("--name", required=True, help="the pair's name: models/pacer-NAME/, docs/results/pacer-sweep-NAME.json")
    c.add_argument("--data-dir", default="", help="default: $SPECLAB_CACHE or ~/.cache/speclab, pacer-data-NAME")
    c.set_defaults(func=cmd_calibrate)
