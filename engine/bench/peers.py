"""`python -m engine peers`: speclab beside other serving engines on the same prompts and models, interleaved.

Every engine is one entry of a list (engine.bench.peer_engines builds them): an object with a `name`, a
`weights` description, its `configs` and three methods

    start() -> dict                      load / launch (vLLM's engine, llama-server); returns its versions
    run(config, prompt, max_new_tokens) -> PeerRun     one greedy request, timed by the engine's driver
    stop()

so another engine path (speclab on other weights, SGLang, …) is one more entry. `run_peers` starts every
entry once and keeps it up, warms every (engine, config) on the first prompt untimed, then runs each
prompt through every (engine, config) back to back, the order rotated by one slot per prompt (so load
drift hits every engine alike), and stops them all. An entry that can hold only one config at a time
(`one_at_a_time` and `activate(config)`: vLLM, each of whose engines takes 6–8 GiB) makes rounds, one
per config of it: in each round the other entries run all their configs beside that one, so each of
its configs runs interleaved with everything else, and theirs run once per round. Its rows have one
schema whatever the engine:

    tokens_per_s              mean over prompts of new tokens ÷ the request's wall time (prefill included)
    speedup_vs_own_ar         tokens_per_s ÷ the same engine's `ar` row (each engine against its own AR)
    mean_acceptance_length    1 + accepted ÷ verify steps that checked drafts (vLLM's definition, bonus incl.)
    draft_acceptance_rate     accepted ÷ drafted
    per_position_acceptance   accepted at draft position j ÷ those verify steps (vLLM's Prometheus counters
                              per position ÷ its drafts), j = 1…K; None where the engine reports totals only
    same_output_as_ar         prompts whose greedy output is token for token the engine's own AR output
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Protocol


@dataclass(frozen=True)
class PeerPrompt:
    question_id: Any
    task: str
    text: str
    ids: tuple[int, ...]  # the prompt's token ids (chat template applied): every engine gets these very ids


@dataclass
class PeerRun:
    """One configuration of one engine on one prompt."""
    engine: str
    config: str
    question_id: Any
    task: str
    new_tokens: int
    wall_s: float
    spec_steps: int = 0  # verify calls that checked at least one draft token
    drafted: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] | None = None  # [accepted at draft position 1, 2, …]; None: not reported
    output: list[int] | None = None  # the new token ids, where the engine returns them
    reported: dict[str, Any] = field(default_factory=dict)  # the engine's own figures for the request


class PeerEngine(Protocol):
    name: str
    weights: str
    configs: tuple[str, ...]

    def start(self) -> dict[str, Any]: ...

    def run(self, config: str, prompt: PeerPrompt, max_new_tokens: int) -> PeerRun: ...

    def stop(self) -> None: ...


def check_run(r: PeerRun) -> PeerRun:
    """A driver's run, refused in one line when its counts cannot be."""
    where = f"{r.engine} {r.config} q{r.question_id}"
    if r.new_tokens < 1 or not r.wall_s > 0:
        raise ValueError(f"{where}: {r.new_tokens} tokens in {r.wall_s} s")
    if r.accepted > r.drafted or (r.drafted and r.spec_steps < 1):
        raise ValueError(f"{where}: {r.accepted} accepted of {r.drafted} drafted over {r.spec_steps} verify steps")
    if r.accepted_per_pos is not None and sum(r.accepted_per_pos) != r.accepted:
        raise ValueError(f"{where}: accepted per position {r.accepted_per_pos} do not add up to {r.accepted}")
    return r


def rounds(engines: list[PeerEngine]) -> list[list[tuple[PeerEngine, str]]]:
    """The (engine, config) slots of each round. An engine that can hold one config at a time
    (`one_at_a_time`: vLLM, whose engines do not fit in RAM together) runs its configs one per round, in
    order; every other engine runs all its configs in every round."""
    single = [e for e in engines if getattr(e, "one_at_a_time", False)]
    n = max((len(e.configs) for e in single), default=1)
    return [[(e, c) for e in engines
             for c in ((e.configs[r % len(e.configs)],) if getattr(e, "one_at_a_time", False) else e.configs)]
            for r in range(n)]


def _one_line(what: str, err: Exception) -> str:
    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
    return f"{what}: {type(err).__name__}: {first}"


class NoEngineStarted(RuntimeError):
    """Every engine failed to start: one line naming each (the command prints it as its error)."""


def run_peers(engines: list[PeerEngine], prompts: list[PeerPrompt], max_new_tokens: int, warmup_tokens: int = 8,
              checkpoint: Callable[[dict], None] | None = None, say: Callable[[str], None] = print,
              core_check: Callable[[], dict] | None = None) -> dict[str, Any]:
    """Every (engine, config) on every prompt, interleaved, round by round (`rounds`); within a round
    the slots are rotated by one per prompt; `checkpoint(result)` after each prompt.

    An engine that cannot start is reported in one line naming it (`failed` in the result) and left
    out; the others run. `core_check` (default engine.bench.cores.busy_cores) runs once after the
    engines start and before any timing; its verdict is the result's `cores`, and a busy core is said."""
    if not prompts:
        raise ValueError("no prompts")
    names = [e.name for e in engines]
    if len(set(names)) != len(names):
        raise ValueError(f"engine names must differ: {names}")
    for e in engines:
        if "ar" not in e.configs:
            raise ValueError(f"{e.name}: its configs {list(e.configs)} lack 'ar' "
                             "(each engine's speedup is over its own AR)")
    plan = rounds(engines)
    infos: dict[str, Any] = {}
    runs: list[PeerRun] = []

    def result(complete: bool) -> dict[str, Any]:
        return {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "complete": complete,
                "config": {"max_new_tokens": max_new_tokens, "prompts": len(prompts), "warmup_tokens": warmup_tokens,
                           "rounds": [[f"{e.name} {c}" for e, c in slots] for slots in plan],
                           "order": "per round, each prompt through every slot, the slots rotated by one per prompt",
                           "question_ids": [p.question_id for p in prompts]},
                "engines": {e.name: {"weights": e.weights, "configs": list(e.configs), **infos.get(e.name, {})}
                            for e in engines},
                "rows": aggregate(runs, {e.name: e.weights for e in engines}),
                "runs": [r.__dict__ for r in runs], "failed": dict(failed), "cores": cores}

    failed: dict[str, str] = {}
    cores: dict[str, Any] = {}
    try:
        for e in engines:
            say(f"starting {e.name} ({', '.join(e.configs)})")
            try:
                infos[e.name] = e.start()
            except Exception as err:  # a peer that dies at start (a crashing build): name it, keep the rest
                failed[e.name] = _one_line(f"{e.name} could not start", err)
                say(failed[e.name])
        if len(failed) == len(engines):
            raise NoEngineStarted("; ".join(failed.values()))
        if failed:
            plan = rounds([e for e in engines if e.name not in failed])
        if core_check is None:
            from engine.bench.cores import busy_cores as core_check
        cores.update(core_check())
        if cores.get("ok") is False:
            say(f"cores busy before timing: {cores.get('busy')} — another process holds a core; timings of engines "
                f"whose threads spin (llama.cpp) suffer most (recorded in the result)")
        for rnd, slots in enumerate(plan):
            slots = [(e, c) for e, c in slots if e.name not in failed]
            for e, c in list(slots):
                if getattr(e, "one_at_a_time", False):
                    say(f"round {rnd + 1}: {e.name} {c}")
                    try:
                        e.activate(c)
                    except Exception as err:  # its engine for this config died starting: drop it, keep what ran
                        failed[e.name] = _one_line(f"{e.name} could not start {c}", err)
                        say(failed[e.name])
                        slots = [(e2, c2) for e2, c2 in slots if e2 is not e]
            if not slots:
                continue
            for e, c in slots:  # untimed: the first requests of a config are slow
                if warmup_tokens and (rnd == 0 or getattr(e, "one_at_a_time", False)):
                    e.run(c, prompts[0], warmup_tokens)
            for i, p in enumerate(prompts):
                k = i % len(slots)
                for e, c in slots[k:] + slots[:k]:
                    r = check_run(e.run(c, p, max_new_tokens))
                    r.reported["round"] = rnd + 1
                    runs.append(r)
                    say(f"q{p.question_id} {e.name} {c}: {r.new_tokens} tokens, {r.new_tokens / r.wall_s:.2f} tokens/s"
                        + (f", mean acceptance length {1 + r.accepted / r.spec_steps:.2f}" if r.spec_steps else ""))
                if checkpoint is not None:
                    checkpoint(result(False))
        if not runs:
            raise NoEngineStarted("; ".join(failed.values()))
    finally:
        for e in engines:
            try:
                e.stop()
            except Exception as err:  # one engine's shutdown must not hide the others' or the run's error
                say(f"stopping {e.name}: {err}")
    return result(True)


def _mean(xs: list[float]) -> float:
    return statistics.mean(xs) if xs else float("nan")


def aggregate(runs: list[PeerRun], weights: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per (engine, config): engines in the order they first ran, each engine's configs likewise."""
    engines = list(dict.fromkeys(r.engine for r in runs))
    keys = sorted(dict.fromkeys((r.engine, r.config) for r in runs), key=lambda k: engines.index(k[0]))
    ar_out = {(r.engine, r.question_id): r.output for r in runs if r.config == "ar"}
    rows = []
    for eng, conf in keys:
        rs = [r for r in runs if (r.engine, r.config) == (eng, conf)]
        base = [r for r in runs if (r.engine, r.config) == (eng, "ar")]
        tps = _mean([r.new_tokens / r.wall_s for r in rs])
        steps, drafted, acc = (sum(getattr(r, k) for r in rs) for k in ("spec_steps", "drafted", "accepted"))
        per_pos = None
        if drafted and all(r.accepted_per_pos is not None for r in rs):
            n = max(len(r.accepted_per_pos) for r in rs)
            per_pos = [sum((r.accepted_per_pos + [0] * n)[j] for r in rs) / steps for j in range(n)]
        same = [r.output == ar_out.get((eng, r.question_id)) for r in rs
                if r.output is not None and ar_out.get((eng, r.question_id)) is not None]
        rows.append({"engine": eng, "config": conf, "weights": (weights or {}).get(eng, ""), "prompts": len(rs),
                     "new_tokens": sum(r.new_tokens for r in rs), "wall_s": sum(r.wall_s for r in rs),
                     "tokens_per_s": tps, "speedup_vs_own_ar": tps / _mean([r.new_tokens / r.wall_s for r in base])
                     if base else None,
                     "spec_steps": steps, "drafted": drafted, "accepted": acc,
                     "mean_acceptance_length": 1 + acc / steps if steps else None,
                     "draft_acceptance_rate": acc / drafted if drafted else None,
                     "per_position_acceptance": per_pos,
                     "same_output_as_ar": f"{sum(same)}/{len(same)}" if same else None})
    return rows


def best(rows: list[dict[str, Any]], engine: str, speculative: bool = True) -> dict[str, Any] | None:
    """The engine's fastest row (speculative rows only, or any)."""
    rs = [r for r in rows if r["engine"] == engine and (r["config"] != "ar" or not speculative)]
    return max(rs, key=lambda r: r["tokens_per_s"], default=None)


def target_check(rows: list[dict[str, Any]], ours: str = "speclab", peer: str = "vllm") -> dict[str, Any] | None:
    """speclab's best row ÷ the peer's best speculative row, in tokens/s (the issue's target: ≥ 1.0)."""
    a, b = best(rows, ours, speculative=False), best(rows, peer)
    if a is None or b is None:
        return None
    return {"ours": f"{ours} {a['config']}", "ours_tokens_per_s": a["tokens_per_s"], "peer": f"{peer} {b['config']}",
            "peer_tokens_per_s": b["tokens_per_s"], "ratio": a["tokens_per_s"] / b["tokens_per_s"]}


def ar_ratio(rows: list[dict[str, Any]], ours: str, peer: str) -> dict[str, Any] | None:
    """`ours`'s autoregressive tokens/s ÷ `peer`'s, same prompts and models (the quantized path's target:
    ≥ 0.5× llama.cpp on the same GGUF and threads)."""
    a = next((r for r in rows if r["engine"] == ours and r["config"] == "ar"), None)
    b = next((r for r in rows if r["engine"] == peer and r["config"] == "ar"), None)
    if a is None or b is None or not b["tokens_per_s"]:
        return None
    return {"ours": f"{ours} ar", "ours_tokens_per_s": a["tokens_per_s"], "peer": f"{peer} ar",
            "peer_tokens_per_s": b["tokens_per_s"], "ratio": a["tokens_per_s"] / b["tokens_per_s"]}


def _f(v, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def format_table(rows: list[dict[str, Any]]) -> str:
    """The peers table as Markdown (a roofline column where the rows carry the fraction: engine.bench.roofline)."""
    roof = any("roofline_fraction" in r for r in rows)
    out = ["| engine | weights | config | tokens/s | speedup vs own AR | mean acceptance length | acceptance rate | "
           "accepted per position | same output as AR |" + (" roofline fraction |" if roof else ""),
           "|---|---|---|---|---|---|---|---|---|" + ("---|" if roof else "")]
    for r in rows:
        pos = "–" if not r["per_position_acceptance"] else " ".join(f"{x:.2f}" for x in r["per_position_acceptance"])
        out.append(f"| {r['engine']} | {r['weights']} | `{r['config']}` | {r['tokens_per_s']:.2f} | "
                   f"{_f(r['speedup_vs_own_ar'], '.2f')}× | {_f(r['mean_acceptance_length'], '.3f')} | "
                   f"{_f(r['draft_acceptance_rate'], '.3f')} | {pos} | {r['same_output_as_ar'] or '–'} |"
                   + (f" {_f(r.get('roofline_fraction'), '.2f')} |" if roof else ""))
    return "\n".join(out)


def log_entry(result: dict[str, Any], title: str = "speclab beside vLLM and llama.cpp on the Qwen pair") -> str:
    """A dated docs/log entry's measured part, from a peers result: setup (machine, flags, versions,
    command, date), the table, the target check and the per-round AR tokens/s (the load drift the
    rounds saw). The question, the answer and the reading are the author's."""
    cfg, eng = result.get("config", {}), result.get("engines", {})
    date = str(result.get("created", ""))[:10]
    flags = (result.get("lscpu") or {}).get("Flags", "")
    keep = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8") if f in flags.split()]
    lines = [f"# {date} — {title}", "", "**Question.** …", "", "**Answer.** …", "", "## Setup", "",
             f"- Machine: {result.get('machine', '?')}; lscpu: {(result.get('lscpu') or {}).get('Model name', '?')}, "
             f"{(result.get('lscpu') or {}).get('CPU(s)', '?')} CPUs, flags include {' '.join(keep) or '—'}.",
             f"- Prompts: {cfg.get('prompts')} (question ids {cfg.get('question_ids')}), greedy, "
             f"{cfg.get('max_new_tokens')} new tokens, every engine fed the same prompt token ids; "
             f"{cfg.get('warmup_tokens')}-token warm-up per config, untimed.",
             f"- Order: {cfg.get('order')}; rounds: " + "; ".join(", ".join(r) for r in cfg.get("rounds", [])) + "."]
    for name, e in eng.items():
        info = {k: v for k, v in e.items() if k not in ("configs", "command", "build")}  # build: its line says it
        lines.append(f"- {name}: {json_short(info)}")
    for line in (result.get("failed") or {}).values():
        lines.append(f"- left out: {line}")
    lines += ["", "Command:", "", "```", str(result.get("command", "")), "```", "", "## The table", "",
              format_table(result.get("rows", [])), ""]
    for peer, t in (result.get("target_check") or {}).items():
        if t:
            lines.append(f"- speclab's best ÷ {peer}'s best speculative: {t['ours']} {t['ours_tokens_per_s']:.2f} "
                         f"tokens/s ÷ {t['peer']} {t['peer_tokens_per_s']:.2f} = **{t['ratio']:.2f}×**")
    drift = {}
    for r in result.get("runs", []):
        if r["config"] == "ar":
            drift.setdefault(r["engine"], {}).setdefault(r["reported"].get("round", 1), []).append(
                r["new_tokens"] / r["wall_s"])
    if drift:
        lines += ["", "AR tokens/s per round (mean over prompts; the drift the rounds saw): " + "; ".join(
            f"{e} " + " / ".join(f"{_mean(v):.2f}" for _, v in sorted(rs.items())) for e, rs in drift.items())]
    return "\n".join(lines) + "\n"


def json_short(d: dict[str, Any]) -> str:
    import json

    return json.dumps(d, sort_keys=True, default=str)[:600]
