"""CLI for window analysis (registered in engine.__main__.CLI_MODULES):

    python -m engine reference --target T --draft D --prompts FILE --out REF.jsonl
    python -m engine analyze REF.jsonl [TRACE.jsonl ...] [--costs measured,0.05] [--out DIR]
    python -m engine analyze --copy-drafter lookup:n=10,ngram=2 AR.jsonl [TRACE.jsonl ...] [--out DIR]

`reference` records one target run + the draft's teacher-forced pass (engine.offline.reference);
`analyze` prints the oracle / fixed / adaptive tables (engine.offline.analysis) and writes CSV + JSON;
with `--copy-drafter` it replays a model-free drafter over the greedy autoregressive traces given
(engine.offline.copy_source), priced by default with the in-run costs of the other traces and c = 0.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from engine.cli.common import add_per_task


def add_parser(sub) -> None:
    r = sub.add_parser("reference", help="record A(j), draft signals and timings for offline window analysis")
    r.add_argument("--target", required=True, help="bundled name (smollm2-135m), local dir, or cached hub id")
    r.add_argument("--draft", required=True, help="draft model")
    r.add_argument("--prompts", required=True, help="JSONL: Spec-Bench ('turns') or {'prompt': ...} lines")
    r.add_argument("--limit", type=int, default=None, help="first N prompts")
    add_per_task(r, None, dest="per_category")
    r.add_argument("--max-new-tokens", type=int, default=128)
    r.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (exact replay); >0 records β_j")
    r.add_argument("--top-k", type=int, default=0)
    r.add_argument("--top-p", type=float, default=1.0)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--max-window", type=int, default=16, help="longest window replayed exactly (tail length + 1)")
    r.add_argument("--timing-repeats", type=int, default=5, help="median over this many forwards per k")
    r.add_argument("--no-timing", action="store_true", help="skip t(k) measurement (analyze then needs --costs C)")
    r.add_argument("--dtype", default="fp32",
                   help="fp32 (default: exact replay; in bf16 a multi-token verify can round a near-tie "
                        "differently from the single-token run, so real runs may leave the reference's text) "
                        "| bf16 | fp16 | auto")
    r.add_argument("--device", default="auto", help="cpu | cuda | auto")
    r.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    r.add_argument("--no-chat", action="store_true", help="do not apply the tokenizer's chat template")
    r.add_argument("--out", required=True, help="reference path (.jsonl)")
    r.add_argument("--outputs-from", default=None,
                   help="greedy: take the target's runs from this autoregressive trace where it has the "
                        "question (same prompt) instead of decoding them again; the others are decoded")
    r.set_defaults(func=cmd_reference)

    a = sub.add_parser("analyze", help="oracle vs fixed vs adaptive window tables from references / traces")
    a.add_argument("paths", nargs="+", help="reference files (python -m engine reference) and/or decode traces")
    a.add_argument("--costs", default=None,
                   help="cost models for the 1.4x table: 'measured', a ratio c (flat verify), C@measured "
                        "(c with the measured verify curve), or 'in-run' (what the decode traces given alongside "
                        "paid per step: see CostModel.from_steps); default measured,0.02,0.05,0.1,0.2 "
                        "(--copy-drafter: in-run,0 with c = 0, or 0 without the drafter's decode traces)")
    a.add_argument("--cost", default=None, help="cost model for the window table (default: measured if "
                                               "the references have timings, else 0.05; --copy-drafter: in-run "
                                               "if its decode traces are given, else 0; 'in-run' as in --costs)")
    a.add_argument("--gammas", default="1-16", help="fixed windows to compare, e.g. 1-16 or 1,2,4,8")
    a.add_argument("--policies", default="heuristic,confidence,cumulative,entropy,costaware",
                   help="adaptive policies, ';'-separated when a spec has commas (e.g. 'confidence:0.3;heuristic')")
    a.add_argument("--copy-drafter", default=None, metavar="SPEC",
                   help="replay this model-free drafter (lookup:n=10,ngram=2, suffix:n=16) exactly over the "
                        "greedy autoregressive traces among the paths; its decode traces give the in-run costs")
    a.add_argument("--out", default=None, help="directory for CSV + JSON tables (for the app)")
    a.set_defaults(func=cmd_analyze)


def _gammas(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, dash, hi = part.partition("-")
        try:
            out.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
        except ValueError:
            raise ValueError(f"bad --gammas {text!r}: use e.g. 1-16 or 1,2,4,8") from None
    if not out or min(out) < 1 or max(out) > 64:
        raise ValueError(f"--gammas must lie in 1..64, got {text!r}")
    return sorted(set(out))


def _policies(text: str) -> list[str]:
    from engine.cli.checks import split_specs

    return split_specs(text, "--policies")


def _cost_value(text: str):
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return text


def cmd_reference(a) -> int:
    import torch

    from engine.models.load import check_pair, eos_token_ids, load_model
    from engine.trace.prompts import encode, load_prompts
    from engine.offline.reference import ReferenceConfig, build_reference
    from engine.core.sampling import SamplingConfig

    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = ReferenceConfig(max_new_tokens=a.max_new_tokens,
                          sampling=SamplingConfig(a.temperature, a.top_k, a.top_p, a.seed),
                          max_window=a.max_window, timing_repeats=a.timing_repeats, measure_timings=not a.no_timing)
    prompts = load_prompts(a.prompts, limit=a.limit, per_category=a.per_category)
    target = load_model(a.target, a.dtype, a.device, role="target")
    draft = load_model(a.draft, a.dtype, a.device, role="draft", target=target)
    check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
    tok = target.tokenizer
    if tok is None:
        raise ValueError(f"target {a.target!r} has no tokenizer; cannot encode text prompts")
    reqs = [{"prompt_ids": encode(tok, p.text, chat=not a.no_chat), "category": p.category,
             "question_id": p.question_id, "text": p.text} for p in prompts]
    if a.outputs_from:  # the target's greedy runs already made (an autoregressive trace): reuse those
        from engine.offline.reference import ar_runs_from_trace

        runs = ar_runs_from_trace(a.outputs_from)
        for r in reqs:
            if r["question_id"] not in runs:
                continue  # not in the trace: decoded here as usual
            if runs[r["question_id"]]["prompt_ids"] != r["prompt_ids"]:
                raise ValueError(f"{a.outputs_from}: question {r['question_id']} was decoded from another prompt")
            r["known"] = runs[r["question_id"]]
        print(f"reusing {sum('known' in r for r in reqs)} of {len(reqs)} target runs from {a.outputs_from}")
    path = build_reference(target.lm, draft.lm, reqs, cfg, a.out, eos_ids=eos_token_ids(target),
                           header_extra={"command": " ".join(["python -m engine", *sys.argv[1:]]),
                                         "prompts_file": str(a.prompts)})
    from engine.trace.reference_file import load_reference

    ref = load_reference(path)
    n = sum(len(r["output_ids"]) for r in ref.requests)
    print(f"wrote {path}: {len(ref.requests)} requests, {n} positions, mode {ref.header['mode']}")
    t = ref.header.get("timings")
    if t:
        tk = t["target_ms_by_tokens"]
        print(f"  draft {t['draft_ms_per_token']:.2f} ms/token; target t(1)={tk[0]:.2f} ms, "
              f"t({len(tk)})={tk[-1]:.2f} ms; c = {t['draft_ms_per_token'] / tk[0]:.3f}")
    return 0


def _show(title: str, df, cols=None) -> None:
    import pandas as pd

    print(f"\n== {title}")
    if df.empty:
        print("(empty)")
        return
    with pd.option_context("display.width", 200, "display.max_columns", 40, "display.max_rows", 400,
                           "display.float_format", lambda x: f"{x:.3f}"):
        print((df[cols] if cols else df).to_string(index=False))


def _write(out: Path | None, name: str, df) -> None:
    if out is None:
        return
    df.to_csv(out / f"{name}.csv", index=False)
    rows = json.loads(df.to_json(orient="records"))
    (out / f"{name}.json").write_text(json.dumps({"table": name, "note": df.attrs.get("note", ""), "rows": rows},
                                                 indent=1, allow_nan=False))


def _provenance(a, refs, notes: list[str]) -> dict:
    """summary.json: the inputs and notes, with the command, date, machine and software of this analysis and of
    each reference it replays (whose timings price the tables: they were measured where it was recorded)."""
    from datetime import datetime, timezone

    from engine.cli.common import command_line
    from engine.models.load import machine_description, software_versions

    return {"inputs": list(a.paths), "notes": notes, "command": command_line(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine_description(),
            "software": software_versions(),
            "references": [{"source": str(r.source), **{k: r.header[k] for k in ("created", "command", "software")
                                                         if k in r.header}} for r in refs]}


def _copy_runs(a, refs, traces, notes: list[str]):
    """--copy-drafter: the greedy autoregressive traces as copy runs (engine.offline.copy_source), the
    default costs (in-run with c = 0 when the drafter's decode traces are given, else c = 0 flat) and
    the in-run cost model's settings."""
    from engine.offline import analysis as an
    from engine.offline.copy_source import copy_run

    if refs:
        raise ValueError("--copy-drafter replays over autoregressive decode traces, not reference files")
    ars = [t for t in traces if t.header.get("draft") is None
           and float((t.header.get("sampling") or {}).get("temperature", 0)) == 0]
    if not ars:
        raise ValueError("--copy-drafter needs a greedy autoregressive decode trace among the paths")
    runs = [copy_run(t, a.copy_drafter) for t in ars]
    spec = runs[0].header["draft"]["name"]
    paid = [t for t in an.in_run_traces(traces, runs) if t.header.get("draft") is not None]
    if a.costs is None:
        a.costs = "in-run,0" if paid else "0"
    if a.cost is None:
        a.cost = "in-run" if paid else "0"
    notes.append(f"copy drafter {spec} replayed over {sum(len(r.requests) for r in runs)} requests of "
                 f"{', '.join(Path(t.source).name for t in ars)} (exact for greedy decoding; accepted counts "
                 "censored at EOS); draft cost c = 0" + (f"; in-run costs from {len(paid)} decode trace(s) of "
                                                        "the drafter (its per-step time stays in v)" if paid else ""))
    return runs, {"c": 0.0, "max_window": max(r.drafter_window for r in runs)}


def cmd_analyze(a) -> int:
    from engine.offline import analysis as an

    refs, traces = [], []
    for p in a.paths:
        kind, obj = an.load_any(p)
        (refs if kind == "reference" else traces).append(obj)
    notes: list[str] = []
    in_run_kw: dict = {}
    if a.copy_drafter:
        refs, in_run_kw = _copy_runs(a, refs, traces, notes)
    out = Path(a.out) if a.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    if refs:
        gammas, policies = _gammas(a.gammas), _policies(a.policies)
        costs = [_cost_value(c) for c in (a.costs or "measured,0.02,0.05,0.1,0.2").split(",") if c.strip()]
        if "in-run" in costs or a.cost == "in-run":  # what the decode traces given alongside paid per step
            in_run = an.in_run_cost(traces, refs, **in_run_kw)
            costs = [in_run if c == "in-run" else c for c in costs]
            notes.append(f"in-run cost model from the decode traces of this pair: c = {in_run.c:.3f}, "
                         f"v(1) = {in_run.v(1):.2f}, v(4) = {in_run.v(4):.2f}, t(1) = {in_run.target_ms:.0f} ms")
        timed = an.has_timings(refs)
        if not timed and any(isinstance(c, str) and c.endswith("measured") for c in costs):
            notes.append("references have no timings: measured cost models skipped")
            costs = [c for c in costs if not (isinstance(c, str) and c.endswith("measured"))]
        main = (in_run if a.cost == "in-run" else _cost_value(a.cost)) if a.cost else ("measured" if timed else 0.05)
        for r in refs:
            steps = [q["target_step_ms"] for q in r.requests if "target_step_ms" in q]
            t = r.header.get("timings") or {}
            if steps and t.get("target_ms_by_tokens"):
                import statistics

                notes.append(f"{Path(r.source).name}: timing cross-check: t(1) = {t['target_ms_by_tokens'][0]:.1f} ms "
                             f"in the timing block vs median {statistics.median(steps):.1f} ms per single-token step "
                             "during the target runs (a large gap means a loaded machine: trust the fixed-c rows)")
        greedy = all(r.greedy for r in refs)
        low = sorted({str((r.header.get("target") or {}).get("dtype")) for r in refs} - {"float32", "float64", "None"})
        if low:
            notes.append(f"reference target dtype {', '.join(low)}: a real speculative run can round a near-tie "
                         "differently from the single-token reference run and leave its text; record references "
                         "with --dtype fp32 for step-exact replay")
        if not a.copy_drafter:  # a copy run's note (_copy_runs) says what is exact
            notes.append("greedy references: every simulated number is exact for the reference text" if greedy else
                         "sampling references: fixed/oracle numbers are expected values under per-position β_j; "
                         "adaptive policies are omitted")
        wt = an.window_table(refs, main, gammas, policies, progress=True)
        allrows = wt[wt["task"] == "all"]
        _show(f"window table (all tasks, cost {allrows['cost'].iloc[0]}; emitted incl. bonus, accepted excl.)",
              allrows, ["policy", "target_calls", "mean_emitted_per_call_incl_bonus", "mean_accepted_per_call_excl_bonus", "drafted",
                        "wasted_draft", "sim_time", "speedup", "rel_best_fixed", "value"])
        wide, long = an._ratio_tables(refs, costs, gammas, policies, progress=False)
        _show("oracle / best fixed (the 1.4x table; iid_* = closed form at the same alpha and c)", wide,
              ["task", "cost", "alpha", "best_gamma", "s_best_fixed", "s_oracle_a", "s_oracle_b", "s_oracle_c",
               "ratio_a", "ratio_b", "ratio_c", "iid_ratio_a", "iid_ratio_b", "value"] if not wide.empty else None)
        if not long.empty:
            piv = long.pivot_table(index=["task", "policy"], columns="cost", values="position", sort=False)
            _show("adaptive policies: position = (S - S_fixed*) / (S_oracle(a) - S_fixed*), 0 = best fixed, "
                  "1 = oracle", piv.reset_index())
        vt = an.variability_table(refs, main, gammas)
        _show("variability of A(j) and of the per-step best window", vt,
              ["task", "positions", "alpha", "A_mean", "A_std", "A_iqr", "oracle_steps", "best_window_mean",
               "best_window_std", "best_window_iqr", "best_fixed_gamma", "frac_differs", "frac_shorter",
               "frac_longer"])
        tables = [("window_table", wt), ("oracle_ratio", wide), ("policy_positions", long),
                  ("variability", vt), ("positions", an.positions_frame(refs))]
        if greedy and not a.copy_drafter:  # model-free drafts carry no confidence to read
            from engine.offline.confidence_ceiling import confidence_ceiling, signal_table

            cc = confidence_ceiling(refs, lambda r: an.cost_for(r, main))
            _show("confidence ceiling: the best rule reading only the draft's confidence, its acceptance per "
                  "bin known in hindsight (engine.offline.confidence_ceiling)", cc)
            notes.append(cc.attrs["note"])
            sig = signal_table(refs)
            _show("signals: AUC of what a window could read before verifying (accepted above rejected drafts)",
                  sig[sig["task"] == "all"])
            tables += [("confidence_ceiling", cc), ("signals", sig)]
        for name, df in tables:
            _write(out, name, df)
        if out is not None:
            iid = [an.iid_theory(min(r["alpha"], 0.999999), r["c"], gammas).assign(task=r["task"], cost=r["cost"])
                   for r in wide.to_dict("records") if not math.isnan(r["alpha"])]
            if iid:
                import pandas as pd

                _write(out, "iid_theory", pd.concat(iid, ignore_index=True))
    if traces:
        tt = an.trace_table(traces)
        _show("decode traces: measured accepted length per step (censored at each step's window)", tt,
              ["source", "policy", "task", "steps", "accepted_mean", "accepted_std", "accepted_median",
               "censored_frac", "mean_emitted_per_call_incl_bonus", "draft_ms_per_token", "verify_ms_median", "c_measured"])
        notes.append("decode traces: accepted lengths are censored at the window (a fixed-γ trace at γ); "
                     "use a reference run for oracle numbers")
        _write(out, "trace_table", tt)
        _write(out, "trace_accepted", an.trace_accepted_frame(traces))
    for n in notes:
        print(f"note: {n}")
    if out is not None:
        (out / "summary.json").write_text(json.dumps(_provenance(a, refs, notes), indent=1))
        print(f"wrote tables to {out}/")
    return 0
