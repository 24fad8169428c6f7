"""The results page, generated: docs/results/*.json → docs/results.md and the README's results block.

Each result file is read in its writer's shape (engine/bench/bench.py and `pacer bench`: per-task rows
with an "overall" row per (temperature, config); engine/bench/multibench.py: one row per (T, config);
engine/bench/paired.py: modelled rows plus `real_rows`, the runs that really decoded). One Row per
(file, config, temperature) keeps the run's own ratio

    speedup = tok/s of the configuration ÷ tok/s of the same run's autoregressive decoding

(interleaved per prompt, so machine drift hits both alike) and the metric vocabulary of engine/metrics.py
(EMITTED_PER_CALL, ACCEPTANCE_RATE; older files' names mapped by `canonical_row`). Rows are grouped into
tables by pair and regime (dtype, machine, prompt set); each table keeps, per method, the configuration
with the best greedy speedup (T = 0.7 where a method has no greedy run). Files of other shapes (offline
sweeps, probes, cost curves) are listed with the reason they are not tabulated.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from engine.metrics import ACCEPTANCE_RATE, EMITTED_PER_CALL, SHORT_LABELS, canonical_row
from engine.paths import REPO_ROOT

RESULTS_DIR = REPO_ROOT / "docs" / "results"
PAGE = REPO_ROOT / "docs" / "results.md"
README = REPO_ROOT / "README.md"
BEGIN, END = "<!-- results:begin (python -m engine results) -->", "<!-- results:end -->"
HEAD_BEGIN, HEAD_END = "<!-- headline:begin (python -m engine results) -->", "<!-- headline:end -->"

PAIRS = {"qwen2.5-coder-1.5b": "Qwen2.5-Coder-1.5B ← 0.5B", "smollm2-135m": "SmolLM2-135M ← smollm2-draft"}
DTYPES = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
ALL_TASKS = 6  # Spec-Bench's dev tasks: writing/mt_bench, translation, summarization, qa, math_reasoning, rag
VERIFIERS = {"token": "SD (token verify)", "sd": "SD (token verify)", "block": "block verify", "bv": "block verify",
             "rbv": "RBV", "kbv": "KBV", "rrs": "RRS", "kseq": "K-SEQ", "gbv": "SpecTr-GBV",
             "spectr-gbv-published": "SpecTr-GBV"}
POLICIES = {"fixed": "fixed γ (best)", "heuristic": "heuristic", "confidence": "confidence", "cumulative": "cumulative",
            "entropy": "entropy", "pacer": "PACER", "oracle": "oracle (hindsight)", "matchlen": "match length"}
# Why a file of another shape is not a row of the tables (first matching name prefix).
UNTABULATED = {"pacer-sweep": "offline replay of recorded steps (PACER rule sweep), not a timed run",
               "pacer-eval": "pre-verifier evaluation (AUC, time share), not a timed run",
               "pacer-retrained": "pre-verifier training summaries, not a timed run",
               "step-probe": "one step timed by part (a probe), not a decoding run",
               "costs": "cost curves c and v(γ), not a decoding run",
               "qwen-draft-vocab": "draft-head agreement and cost, not a decoding run",
               "gpu-check": "exactness and cost curves on a GPU, not a decoding run",
               "overhead": "the kernel and framework shares of one decode step (a probe), not a decoding run",
               "kernels": "matmul kernels side by side (a probe), not a decoding run",
               "roofline": "each model and weights path against the memory roofline: the Memory roofline section",
               "peers": "engines side by side (speclab, vLLM, llama.cpp), each over its own AR: the peers log entry"}


@dataclass(frozen=True)
class Row:
    config: str
    method: str  # the table's row label (a family: "fixed γ (best)", "prompt lookup", "RBV K=4", …)
    temperature: float
    speedup: float
    emitted: float | None
    acceptance: float | None
    decode_only: bool = False  # speedup over decode time only (prefill excluded)


@dataclass(frozen=True)
class Run:
    file: str  # relative to docs/
    experiment: str | None  # relative to the repository root
    pair: str
    regime: str
    prompts: int
    tokens: int
    rows: tuple[Row, ...]


def machine_summary(machine: str | None) -> str:
    """'AMD EPYC, 2 cores, no GPU; flags: avx2 avx512f avx512_bf16' → 'AMD EPYC, avx512_bf16'."""
    if not machine:
        return "machine not recorded"
    cpu = machine.split(",")[0].replace("(R)", "").replace(" Processor", "").strip()
    flags = machine.partition("flags:")[2].split()
    kind = ("avx512_bf16 + AMX" if any(f.startswith("amx") for f in flags) else
            "avx512_bf16" if "avx512_bf16" in flags else "AVX2 only" if "avx2" in flags else "flags not recorded")
    return f"{cpu}, {kind}"


def drafter_kind(drafter: str) -> str | None:
    """The model-free / phrase drafter a spec names ('lookup:n=10' → 'prompt lookup'), None for a model."""
    if "phrase:" in drafter:
        return "phrase"
    head = drafter.split(":")[0]
    return {"lookup": "prompt lookup", "suffix": "suffix", "eagle": "EAGLE-style head"}.get(head)


def bench_method(config: str, draft: str) -> str:
    """The row label of a bench configuration (its policy family, or its drafter when model-free)."""
    if config == "ar":
        return "AR"
    if config.startswith("hf:"):
        rest = config[3:].split(":")[0]
        return {"lookup": "HF prompt lookup", "ar": "HF generate (no draft)"}.get(rest, "HF assisted")
    policy, _, drafter = config.partition("@")
    if drafter.startswith("ctx:"):  # the run's draft model through a context window: its own family of rows
        return f"{bench_method(policy, draft)}, draft context window"
    kind = drafter_kind(drafter or draft)
    if kind:
        return kind
    name = policy.split(":")[0]
    if name.startswith("pacer-"):
        return f"PACER ablation ({name[6:]})"
    return POLICIES.get(name, name)


def multibench_method(method: str, k: int) -> str:
    if method == "ar":
        return "AR"
    label = VERIFIERS.get(method, method)
    return label if k == 1 else f"multi-draft {label}"  # the best K shows in the config (method:K:L)


def _tasks(labels: set) -> str:
    labels = {t for t in labels if t and t != "overall"}
    return "all tasks" if len(labels) >= ALL_TASKS or not labels else ", ".join(sorted(labels))


def _regime(d: dict, tasks: str, weights: str = "dense") -> str:
    """dtype · weights path · machine · tasks; a run recorded with kernel switches in front (`SPECLAB_QTILES=1
    python -m engine …`) is its own regime: an opt-in kernel, or a default one switched off, is not the default's."""
    dtype = DTYPES.get(d.get("dtype"), d.get("dtype") or "dtype ?")
    path = "" if weights == "dense" else f" · {weights} weights"  # the quantized fast path is its own regime
    switches = re.match(r"((?:(?:SPECLAB|ONEDNN)_\w+=\S+ )*)", str(d.get("command", ""))).group(1).split()
    if weights != "dense" and "SPECLAB_QTILES=1" in switches:
        path += " on AMX int8 tiles (SPECLAB_QTILES=1)"
    if rest := [w for w in switches if w != "SPECLAB_QTILES=1"]:
        path += f" · kernels {' '.join(rest)}"
    return f"{dtype}{path} · {machine_summary(d.get('machine'))} · {tasks}"


def read_run(path: Path) -> Run | list[Run] | str:
    """The file as a Run (a list of Runs, one per weights path, for a bench run on several), or the
    one-line reason it is not tabulated."""
    name = path.name
    for prefix, why in UNTABULATED.items():
        if name.startswith(prefix):
            return why
    d = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(d, dict) or "rows" not in d or d.get("target") not in PAIRS:
        return "no rows of a known pair"
    common = dict(file=f"results/{name}", experiment=d.get("experiment"), pair=PAIRS[d["target"]],
                  tokens=int(d.get("config", {}).get("max_new_tokens", 0)))
    if d.get("kind") == "paired":
        rows = tuple(Row(r["config"], multibench_method(r["method"], r["k"]), r["temperature"], r["sr"], r["be"],
                         None, decode_only=True) for r in d.get("real_rows", []))
        tasks = _tasks({p["category"] for p in d.get("prompts", [])})
        n = max((r["prompts"] for r in d.get("real_rows", [])), default=0)
        return Run(regime=_regime(d, tasks), prompts=n, rows=rows, **common)
    raw = [canonical_row(r) for r in d["rows"]]
    if not raw:
        return "no speedup rows (a draft-mode comparison)" if "modes" in d else "no rows"
    if "task" in raw[0] and any("weights" in r for r in raw):  # one bench, several weights paths
        tasks = _tasks({r["task"] for r in raw})
        out = []
        for w in dict.fromkeys(r.get("weights", "dense") for r in raw):
            over = [r for r in raw if r["task"] == "overall" and r.get("weights", "dense") == w]
            rows = tuple(Row(r["config"], bench_method(r["config"], d.get("draft", "")), r["temperature"],
                             r["speedup_vs_ar"], r.get(EMITTED_PER_CALL), r.get(ACCEPTANCE_RATE)) for r in over)
            out.append(Run(regime=_regime(d, tasks, w), prompts=max((r["prompts"] for r in over), default=0),
                           rows=rows, **common))
        return out
    if "task" in raw[0]:  # bench / pacer bench: the overall row of each (temperature, config)
        tasks = _tasks({r["task"] for r in raw})
        over = [r for r in raw if r["task"] == "overall"]
        rows = tuple(Row(r["config"], bench_method(r["config"], d.get("draft", "")), r["temperature"],
                         r["speedup_vs_ar"], r.get(EMITTED_PER_CALL), r.get(ACCEPTANCE_RATE)) for r in over)
    else:  # multibench
        tasks = _tasks({p["category"] for p in d.get("prompts", [])})
        over = raw
        rows = tuple(Row(r["config"], multibench_method(r["method"], r["k"]), r["temperature"], r["speedup"],
                         r.get(EMITTED_PER_CALL), r.get(ACCEPTANCE_RATE)) for r in over)
    n = max((r["prompts"] for r in over), default=0)
    return Run(regime=_regime(d, tasks), prompts=n, rows=rows, **common)


def read_all(results_dir: Path = RESULTS_DIR) -> tuple[list[Run], dict[str, str]]:
    runs, skipped = [], {}
    for path in sorted(results_dir.glob("*.json")):
        r = read_run(path)
        if isinstance(r, Run):
            runs.append(r)
        elif isinstance(r, list):
            runs.extend(r)
        else:
            skipped[f"results/{path.name}"] = r
    return runs, skipped


# ---- rendering --------------------------------------------------------------------------------------

GREEDY, WARM = 0.0, 0.7  # the two temperatures of the tables' columns


def _x(v: float | None, dagger: bool = False) -> str:
    return "–" if v is None else f"{v:.2f}×" + ("†" if dagger else "")


def _f(v: float | None, pct: bool = False) -> str:
    return "–" if v is None else (f"{100 * v:.0f} %" if pct else f"{v:.2f}")


def _pair_cells(a: Row | None, b: Row | None, fmt) -> str:
    return " · ".join(fmt(r) for r in (a, b))


@dataclass(frozen=True)
class Entry:
    """One (run, config): its greedy and T = 0.7 rows (either may be missing)."""
    run: Run
    config: str
    method: str
    greedy: Row | None
    warm: Row | None

    def key(self) -> tuple[float, float]:
        g, w = self.greedy, self.warm
        return (g.speedup if g else -1.0, w.speedup if w else -1.0)


def entries(runs: list[Run]) -> list[Entry]:
    out = []
    for run in runs:
        by: dict[str, dict[float, Row]] = {}
        for r in run.rows:
            by.setdefault(r.config, {})[r.temperature] = r
        for config, temps in by.items():
            g, w = temps.get(GREEDY), temps.get(WARM)
            if g or w:
                out.append(Entry(run, config, (g or w).method, g, w))
    return out


def best_per_method(es: list[Entry]) -> list[Entry]:
    """Per method, the entry with the best greedy speedup (then T = 0.7); sorted best first, AR last."""
    best: dict[str, Entry] = {}
    for e in es:
        if e.method not in best or e.key() > best[e.method].key():
            best[e.method] = e
    return sorted(best.values(), key=lambda e: (e.method == "AR", tuple(-x for x in e.key()), e.method))


def _links(e: Entry, rel: str) -> str:
    """'[json](…) · [experiment](…)': `rel` is the path from the page to docs/ ('' or 'docs/')."""
    out = f"[{Path(e.run.file).name}]({rel}{e.run.file})"
    if e.run.experiment:
        up = "" if rel else "../"
        out += f" · [{Path(e.run.experiment).stem}]({up}{e.run.experiment})"
    return out


HEAD = ("| method | config | speedup greedy | speedup T = 0.7 | "
        f"{SHORT_LABELS[EMITTED_PER_CALL]} (greedy · T = 0.7) | {SHORT_LABELS[ACCEPTANCE_RATE]} (greedy · T = 0.7) | "
        "prompts × tokens | result · experiment |\n|---|---|---|---|---|---|---|---|")


def entry_line(e: Entry, rel: str = "") -> str:
    dag = any(r and r.decode_only for r in (e.greedy, e.warm))
    return (f"| {e.method} | `{e.config}` | {_x(e.greedy and e.greedy.speedup, dag)} | "
            f"{_x(e.warm and e.warm.speedup, dag)} | "
            f"{_pair_cells(e.greedy, e.warm, lambda r: _f(r and r.emitted))} | "
            f"{_pair_cells(e.greedy, e.warm, lambda r: _f(r and r.acceptance, pct=True))} | "
            f"{e.run.prompts} × {e.run.tokens} | {_links(e, rel)} |")


def groups(runs: list[Run]) -> dict[tuple[str, str], list[Entry]]:
    out: dict[tuple[str, str], list[Entry]] = {}
    for e in entries(runs):
        out.setdefault((e.run.pair, e.run.regime), []).append(e)
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], "not recorded" in kv[0][1], kv[0][1])))


NOT_METHODS = ("AR", "oracle (hindsight)", "HF generate (no draft)")


def headline(runs: list[Run], all_tasks_only: bool = False) -> list[tuple[str, Entry]]:
    """Per table with a recorded machine: the best deployable method greedy and at T = 0.7 (one line when the
    same entry); the oracle, AR, HF's generate without a draft and PACER's ablations are not methods.
    `all_tasks_only` (the README's): tables on every task, not comparison arms (" · kernels …" regimes)."""
    out = []
    for (_, regime), es in groups(runs).items():
        if "not recorded" in regime or (all_tasks_only and (" · kernels " in regime or not regime.endswith("all tasks"))):
            continue
        cand = [e for e in es if e.method not in NOT_METHODS and not e.method.startswith("PACER ablation")]
        g = max((e for e in cand if e.greedy), key=lambda e: e.greedy.speedup, default=None)
        w = max((e for e in cand if e.warm), key=lambda e: e.warm.speedup, default=None)
        if g is not None and g is w:
            out.append(("greedy, T = 0.7", g))
            continue
        out += [(label, e) for label, e in (("greedy", g), ("T = 0.7", w)) if e is not None]
    return out


def _best_words(e: Entry | None, warm: bool) -> str:
    """'METHOD (`CONFIG`) at 1.57×', or 'plain AR' where the best method does not beat 1.00× (shown to 2 decimals)."""
    row = e and (e.warm if warm else e.greedy)
    if row is None:
        return "not run"
    if round(row.speedup, 2) <= 1.0:
        return f"plain AR (no method beats it; best {e.method} at {row.speedup:.2f}×)"
    return f"{e.method} (`{e.config}`) at {row.speedup:.2f}×"


def headline_sentences(runs: list[Run], all_tasks_only: bool = False) -> list[str]:
    """One sentence per pair and regime of `headline`: its best lossless method greedy and at T = 0.7 in words,
    "plain AR" where nothing beats the run's own autoregressive decoding (the candidates are `headline`'s)."""
    best: dict[tuple[str, str], dict[str, Entry]] = {}
    for label, e in headline(runs, all_tasks_only):
        slot = best.setdefault((e.run.pair, e.run.regime), {})
        for t in ("greedy", "T = 0.7"):
            if t in label:
                slot[t] = e
    out = []
    for (pair, regime), b in best.items():
        g, w = b.get("greedy"), b.get("T = 0.7")
        parts = [f"greedy, {_best_words(g, False)}"] if g else []
        parts += [f"at T = 0.7, {_best_words(w, True)}"] if w else []
        out.append(f"- **{pair}**, {regime}: {'; '.join(parts)}.")
    return out


def render_headline(runs: list[Run]) -> str:
    """The README's headline block: the sentences on all Spec-Bench dev tasks (docs/results.md has every regime)."""
    return "\n".join([HEAD_BEGIN, "**Headline** (speedup over the same run's autoregressive decoding, all Spec-Bench "
                      "dev tasks; generated with [docs/results.md](docs/results.md)):", "",
                      *headline_sentences(runs, all_tasks_only=True), HEAD_END])


HEAD_BEST = ("| pair · regime | best for | " + HEAD[2:].split("\n")[0] + "\n|---|---|" + HEAD.split("\n")[1][1:])


def headline_line(label: str, e: Entry, rel: str = "") -> str:
    return f"| {e.run.pair} · {e.run.regime} | {label} " + entry_line(e, rel)


HOW_TO_READ = """\
**How to read this.** Every number is a ratio inside one run: tokens per second of a configuration ÷
tokens per second of the *same run's* autoregressive decoding, the two interleaved prompt by prompt on
one machine (so load drift hits both alike). Ratios from different tables ran on different machines,
dtypes or prompts: compare rows within a table; a row's result file and experiment say exactly how it
was made (`python -m engine experiment show NAME`; re-run with `python -m engine experiment run NAME`).
Each table keeps, per method, the configuration with the best greedy speedup (its T = 0.7 figure is from
the same run and configuration; "–": that run has none). *Emitted/call* counts the bonus token
(autoregressive = 1.00; vLLM's "mean acceptance length"); *acceptance* is accepted ÷ drafted tokens
(engine/metrics.py). † speedup over decode time only (prefill excluded): the real runs of the paired
multi-draft grid. The oracle is the hindsight window (greedy only): a ceiling, not a method.
"""


def render_page(runs: list[Run], skipped: dict[str, str], roofline: list[str] | None = None) -> str:
    """The page; `roofline`: the Memory roofline section's lines (engine.bench.roofline_report), if any."""
    lines = ["# Results", "",
             "<!-- Generated by `python -m engine results` from docs/results/*.json; do not edit by hand. -->", "",
             "**Headline**: the best lossless method per pair and regime, in words (\"plain AR\" where no method "
             "beats the run's own autoregressive decoding); the table below gives each one's figures.", "",
             *headline_sentences(runs), "",
             HOW_TO_READ, "The chronological notes behind these runs are in [the log](benchmarks.md).", "",
             "## Best method per pair and regime", "",
             "Per table below whose machine the result files record: the best deployable method greedy and "
             "at T = 0.7 (a table without T = 0.7 runs has one line).", "",
             HEAD_BEST, *[headline_line(lab, e) for lab, e in headline(runs)], ""]
    for (pair, regime), es in groups(runs).items():
        lines += [f"## {pair} · {regime}", "", HEAD, *[entry_line(e) for e in best_per_method(es)], ""]
    lines += list(roofline or [])
    lines += ["## Every run", "",
              "Every configuration of every tabulated file, in the file's order.", ""]
    for run in runs:
        es = [e for e in entries([run])]
        lines += [f"<details><summary>{run.file} ({run.pair} · {run.regime})</summary>", "",
                  HEAD, *[entry_line(e) for e in es], "", "</details>", ""]
    lines += ["## Not tabulated", "", "These files hold no timed decoding rows of a known pair:", ""]
    lines += [f"- [{Path(f).name}]({f}): {why}" for f, why in sorted(skipped.items())]
    lines += ["", "Also not tabulated: the modelled rows of the paired multi-draft files (`rows`, priced from "
              "measured costs, not timed; their real runs are), per-task rows (the tables use each run's overall "
              "row), and temperatures other than 0 and 0.7 (in the files and the log)."]
    return "\n".join(lines) + "\n"


def render_readme_block(runs: list[Run]) -> str:
    rows = [headline_line(lab, e, rel="docs/") for lab, e in headline(runs, all_tasks_only=True)]
    return "\n".join([BEGIN, "", "The best deployable method per pair and regime on all Spec-Bench dev tasks "
                      "(speedup vs the same run's autoregressive decoding; every table, the task subsets and "
                      "how to read them: [docs/results.md](docs/results.md)):", "", HEAD_BEST, *rows, "", END])


def splice(text: str, block: str, begin: str = BEGIN, end_mark: str = END, name: str = "results") -> str:
    """`text` with the part between the markers replaced by `block` (markers included in `block`)."""
    start, end = text.find(begin), text.find(end_mark)
    if start < 0 or end < start:
        raise ValueError(f"README.md: no {name} block (the lines {begin!r} … {end_mark!r})")
    return text[:start] + block + text[end + len(end_mark):]


def rendered_files(results_dir: Path = RESULTS_DIR, page: Path = PAGE, readme: Path = README) -> dict[Path, str]:
    """What `python -m engine results` writes: the page, and the README with its block re-rendered."""
    from engine.bench.roofline_report import section

    runs, skipped = read_all(results_dir)
    roofline = section(sorted(results_dir.glob("*.json")), machine_summary)
    return {page: render_page(runs, skipped, roofline),
            readme: with_headline(splice(readme.read_text(encoding="utf-8"), render_readme_block(runs)), runs)}


def with_headline(text: str, runs: list[Run]) -> str:
    """The README with its headline block re-rendered; a README without one gets it above its results block."""
    if HEAD_BEGIN not in text:
        text = text.replace(BEGIN, f"{HEAD_BEGIN}\n{HEAD_END}\n\n{BEGIN}", 1)
    return splice(text, render_headline(runs), HEAD_BEGIN, HEAD_END, "headline")


def stale_files(files: dict[Path, str]) -> list[Path]:
    return [p for p, text in files.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
