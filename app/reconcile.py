"""Every speedup the app shows for a pair, in one table, and the one number that answers "how fast is
speculation here". Pure: result dicts and frames in, one frame of rows and sentences out (the page
app/pages/speedups.py and app/reconcile_sources.py do the loading).

Why one table: the same pair meets 0.64× on Overview (fp32 decode traces), 1.10× on Compare (bf16
peers), 1.60× on Multi-draft (modelled) and four oracle figures on Windows. Each is right about what
it measures; they differ in dtype, weights path, cost basis and sample size, so each row carries those.

Cost basis, one of three:
    wall clock   tokens/s of a real run ÷ the same run's autoregressive tokens/s
    modelled     measured per-call costs combined by a formula (multi-draft's BE × t_AR ÷ step cost,
                 the advice's E(K) ÷ cost(K))
    replayed     a policy or an oracle replayed offline over recorded steps, priced by a cost model

Pairs are keyed by the target model: a model-free drafter on that target (lookup, suffix) answers the
same question ("how fast can this target go") and sits in the same table, its drafter named in `what`.

Every speedup written "N.NN× AR" on a page links here through `linkify` (a link carries the pair and
the row id; the page marks that row).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping
from urllib.parse import quote, urlencode

import pandas as pd

from app import site_map

PAGE = site_map.page("speedups").url  # the reconciliation page's URL path
COLUMNS = ["row", "pair", "what", "speedup", "kind", "basis", "dtype", "weights", "prompts", "tokens", "source", "page"]
HEADERS = {"what": "what", "speedup": "×AR", "kind": "figure", "basis": "cost basis", "dtype": "dtype",
           "weights": "weights path", "prompts": "prompts", "tokens": "tokens per prompt", "source": "from",
           "page": "shown on"}
WALL, MODELLED, REPLAYED = "wall clock", "modelled", "replayed"
RUNNABLE = ("run", "bench", "peer", "sweep")  # a policy you can run, timed: the kinds that may answer the question
# A cell of a grid a page tabulates (every multi-draft verifier × K × L): a row so that the cell's link lands
# on its own figure, listed on the Speedups page only when a link points at it (the grid is on its page).
CELL = "cell"
ALIASES = {"smollm2-135m-instruct": "smollm2-135m"}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")


def pair_id(target: str | None) -> str:
    return slug(ALIASES.get(target or "", target or "unknown"))


def _stem(name: str) -> str:
    return str(name).rsplit("/", 1)[-1].removesuffix(".json").removeprefix("bench-")


def href(pair: str, row: str) -> str:
    """The link a page puts on a speedup: the reconciliation page at that pair and row."""
    return f"{PAGE}?{urlencode({'pair': pair, 'row': row}, quote_via=quote)}"


def dtype_of(text: str | None) -> str:
    """'bf16' / 'fp32' / … from a dtype name, a command line or a file name; '—' when none is said."""
    t = str(text or "").lower()
    m = re.search(r"--dtype[ =](\S+)", t)
    t = m.group(1) if m else t
    for key, name in (("bfloat16", "bf16"), ("bf16", "bf16"), ("float16", "fp16"), ("fp16", "fp16"),
                      ("float32", "fp32"), ("fp32", "fp32"), ("int8", "int8")):
        if key in t:
            return name
    return "—"


def _flag(command: str | None, name: str) -> str | None:
    m = re.search(rf"--{name}[ =](\S+)", str(command or ""))
    return m.group(1) if m else None


def _row(pair: str, row: str, what: str, speedup: float, kind: str, basis: str, dtype: str, weights: str,
         prompts: Any, tokens: Any, source: str, page: str) -> dict:
    return {"row": slug(row), "pair": pair, "what": what, "speedup": float(speedup), "kind": kind, "basis": basis,
            "dtype": dtype, "weights": weights or "dense", "prompts": int(float(prompts)) if prompts else None,
            "tokens": int(round(float(tokens))) if tokens else None, "source": source, "page": page}


# ---------------------------------------------------------------- one builder per source


def run_rows(runs: pd.DataFrame, entries: Mapping[str, Any]) -> list[dict]:
    """Overview's ×AR: every speculative trace with an autoregressive trace of the same run."""
    out = []
    for r in runs[runs["speculative"] & runs["×AR"].notna()].to_dict("records"):
        e = entries[r["label"]]
        s = e.info["summary"]
        per = s["new_tokens"] / s["requests"] if s.get("requests") else None
        weights = str(e.trace.header.get("weights") or "dense")
        out.append(_row(pair_id(r["target"]), run_id(r["label"]), f"{r['Policy']} ({r['Drafter']}), decode trace",
                        r["×AR"], "run", WALL, r["Dtype"], weights, r["Prompts"], per, r["label"],
                        "Overview, Replay, Compare"))
    return out


def run_id(label: str) -> str:
    return slug(f"run-{label}")


def peer_rows(name: str, result: Mapping[str, Any]) -> list[dict]:
    """Compare's peers table: each engine's speculative config over its own AR."""
    cfg, pair = result.get("config") or {}, pair_id(result.get("target"))
    out = []
    for r in result.get("rows") or []:
        x = r.get("speedup_vs_own_ar")
        if r.get("config") == "ar" or x is None:
            continue
        out.append(_row(pair, f"peer-{_stem(name)}-{r.get('engine')}-{r['config']}", f"{r['config']} ({r.get('engine')})", x,
                        "peer", WALL, dtype_of(r.get("weights")) if dtype_of(r.get("weights")) != "—" else dtype_of(name),
                        "quantized" if "quant" in str(r.get("weights") or "") else "dense",
                        r.get("prompts") or cfg.get("prompts"), cfg.get("max_new_tokens"), name, "Compare (peers)"))
    return out


def bench_rows(name: str, result: Mapping[str, Any], configs: Iterable[str], temperature: float = 0.0,
               page: str = "Windows") -> list[dict]:
    """Rows of one `python -m engine bench` result (task overall, one temperature) that a page quotes."""
    want, cfg = set(configs), result.get("config") or {}
    out = []
    for r in result.get("rows") or []:
        if r.get("task") != "overall" or r.get("temperature") != temperature or r.get("config") not in want:
            continue
        kind = "oracle" if r["config"] == "oracle" else "bench"
        what = ("hindsight oracle, real run" if kind == "oracle" else f"{r['config']}, bench") + f" (T = {temperature:g})"
        out.append(_row(pair_id(result.get("target")), f"bench-{_stem(name)}-{r['config']}-t{temperature:g}", what,
                        r["speedup_vs_ar"], kind, WALL, dtype_of(result.get("command")) if dtype_of(
                            result.get("command")) != "—" else dtype_of(name), r.get("weights") or "dense",
                        r.get("prompts") or cfg.get("prompts"), cfg.get("max_new_tokens"), name, page))
    return out


def md_cell_id(name: str, method: str, k: Any, L: Any, t: float) -> str:
    """The row id of one multi-draft cell (verifier × K × L at temperature t) of result file `name`."""
    return slug(f"md-{_stem(name)}-{method}-k{k}-l{L}-t{t:g}")


def md_real_id(name: str, config: str, t: float) -> str:
    return slug(f"mdreal-{_stem(name)}-{config}-t{t:g}")


def dpace_id(folder: str, label: str) -> str:
    return slug(f"dpace-{folder}-{label}")


def multidraft_rows(name: str, rows: pd.DataFrame, real: pd.DataFrame, head: Mapping[str, Any],
                    lossless: Iterable[str]) -> list[dict]:
    """Multi-draft's wall-clock sentence: per temperature the fastest lossless cell and SD's best
    (modelled), and the real runs beside them (measured); then every other cell of the page's table as a
    CELL row (listed only when linked)."""
    pair, dtype = pair_id(head.get("target")), dtype_of(head.get("dtype"))
    tokens = _flag(head.get("command"), "max-new-tokens")
    out = []
    if "sr_model" in rows:
        d = rows[rows["sr_model"].notna() & rows["method"].isin(tuple(lossless) + ("token",))]
        for t, g in d.groupby("temperature"):
            best = g.loc[g["sr_model"].idxmax()]
            cells = [best] + ([g[g["method"] == "token"].sort_values("sr_model").iloc[-1]]
                              if best["method"] != "token" and (g["method"] == "token").any() else [])
            for c in cells:
                out.append(_row(pair, md_cell_id(name, c["method"], c["k"], c["L"], t),
                                f"{c['label']}, K = {int(c['k'])}, L = {int(c['L'])} (T = {t:g})", c["sr_model"],
                                "modelled", MODELLED, dtype, "dense", head.get("prompts"), tokens, name, "Multi-draft"))
    for r in (real.to_dict("records") if len(real) else []):
        if r.get("sr") is None:
            continue
        out.append(_row(pair, md_real_id(name, r["config"], r["temperature"]),
                        f"{r['config']} real run (T = {r['temperature']:g})", r["sr"], "run", WALL, dtype, "dense",
                        r.get("prompts"), tokens, name, "Multi-draft"))
    if "sr_model" in rows:  # the rest of the grid: duplicates of the rows above are dropped by `frame`
        for c in rows[rows["sr_model"].notna()].to_dict("records"):
            t = c["temperature"]
            out.append(_row(pair, md_cell_id(name, c["method"], c["k"], c["L"], t),
                            f"{c['label']}, K = {int(c['k'])}, L = {int(c['L'])} (T = {t:g})", c["sr_model"], CELL,
                            MODELLED, dtype, "dense", head.get("prompts"), tokens, name, "Multi-draft"))
    return out


def window_rows(pair: str, wt: pd.DataFrame, cost: str, refs: str, prompts: int, tokens: int | None, dtype: str,
                ceiling: pd.DataFrame | None = None) -> list[dict]:
    """Windows' replayed figures (task 'all'): best fixed window, oracle (a), the cost-optimal oracle (c)
    and the confidence ceiling, priced by the page's default cost model."""
    g = wt[wt["task"] == "all"]
    fixed = g[g["kind"] == "fixed"]
    out = []
    if len(fixed):
        b = fixed.loc[fixed["speedup"].idxmax()]
        out.append(_row(pair, "replay-best-fixed", f"best fixed window γ = {int(b['gamma'])}, replayed ({cost})",
                        b["speedup"], "replay", REPLAYED, dtype, "dense", prompts, tokens, refs, "Windows"))
    for pol, what in (("oracle:a", "oracle (a): window = accepted run"), ("oracle:c", "cost-optimal hindsight oracle (c)")):
        s = g.loc[g["policy"] == pol, "speedup"]
        if len(s):
            out.append(_row(pair, f"replay-{pol}", f"{what}, replayed ({cost})", s.iloc[0], "oracle", REPLAYED, dtype,
                            "dense", prompts, tokens, refs, "Windows"))
    if ceiling is not None and len(row := ceiling[ceiling["task"] == "all"]):
        r = row.iloc[0]
        if r["ceiling_rule"] != "autoregressive":
            out.append(_row(pair, "replay-confidence-ceiling", f"confidence ceiling ({r['ceiling_rule']}), replayed",
                            r["s_ceiling"], "ceiling", REPLAYED, dtype, "dense", prompts, tokens, refs, "Windows"))
    return out


def pacer_rows(pair: str, position: Mapping[str, float] | None, oracle: float | None, name: str, steps: int | None,
               dtype: str) -> list[dict]:
    """Windows' PACER chart at the draft's measured cost: the best PACER rule and its oracle (held-out steps)."""
    out = []
    if position:
        out.append(_row(pair, "pacer-best", "best PACER rule, held-out steps, replayed", position["speedup"], "replay",
                        REPLAYED, dtype, "dense", None, steps, name, "Windows (PACER's ceiling)"))
    if oracle:
        out.append(_row(pair, "pacer-oracle", "accepted-length oracle of the PACER sweep, replayed", oracle, "oracle",
                        REPLAYED, dtype, "dense", None, steps, name, "Windows (PACER's ceiling)"))
    return out


def dpace_rows(name: str, summary: Mapping[str, Any], pair: str) -> list[dict]:
    """D-PACE's CPU decode speedups (`python -m engine dpace report`): each objective timed on the CPU."""
    out = []
    for r in summary.get("summary") or []:
        if r.get("speedup_cpu_mean") is not None:
            out.append(_row(pair, dpace_id(name, r["label"]), f"block drafter trained with {r['label']}, CPU decode",
                            r["speedup_cpu_mean"], "run", WALL, "fp32", "dense", None, None, f"{name}/summary.json",
                            "D-PACE"))
    return out


def advice_rows(pair: str, speedup: float | None, k: int | None, source: str, units: str, page: str,
                dtype: str) -> list[dict]:
    """The advised fixed window's speedup (engine.offline.advise): modelled from the traces or a reference."""
    if speedup is None or k is None:
        return []
    return [_row(pair, f"advice-{slug(page)}", f"advised K = {k} ({units})", speedup, "advice", MODELLED, dtype,
                 "dense", None, None, source, page)]


# ---------------------------------------------------------------- the table and its sentence


def frame(rows: Iterable[dict]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=COLUMNS)
    return df.drop_duplicates(["pair", "row"]).reset_index(drop=True)


def _count(x: Any) -> float:
    return 0.0 if x is None or pd.isna(x) else float(x)


def sample_size(r: Mapping[str, Any]) -> float:
    return _count(r.get("prompts")) * _count(r.get("tokens"))


def _timed(df: pd.DataFrame, pair: str) -> pd.DataFrame:
    g = df[(df["pair"] == pair) & df["kind"].isin(RUNNABLE) & (df["basis"] == WALL)]
    g = g[~g["what"].str.contains(r"\((?:vllm|llama\.cpp)\)", regex=True)]  # another engine answers for itself
    return g.assign(_n=g.apply(sample_size, axis=1) if len(g) else 0, _bf=g["dtype"] == "bf16",
                    _t0=~g["what"].str.contains(r"T = 0\.\d", regex=True))


def answer_row(df: pd.DataFrame, pair: str) -> pd.Series | None:
    """The row that answers "how fast is speculation here": a policy anyone can run (no oracle, no model,
    no replay) timed on the wall clock by speclab, greedy, from the largest sample (prompts × tokens;
    bf16, the dtype serving uses, breaks ties), its fastest config within that sample."""
    g = _timed(df, pair)
    if g.empty:
        return None
    top = g.sort_values(["_t0", "_n", "_bf"], ascending=False).iloc[0]
    pick = g[(g["_n"] == top["_n"]) & (g["dtype"] == top["dtype"]) & (g["_t0"] == top["_t0"])]
    return pick.loc[pick["speedup"].idxmax()]


def _fmt(x: float) -> str:
    return f"{x:.2f}×"


def answer_sentence(df: pd.DataFrame, pair: str, label: str) -> str:
    """One sentence: the number that answers the question, and why the others differ from it."""
    r = answer_row(df, pair)
    g = df[df["pair"] == pair]
    if r is None:
        return (f"**{label}:** no timed run of a policy against its own autoregressive run is loaded, so no "
                "figure here answers how fast speculation is; the rows below are models or replays.")
    out = (f"**{label}: speculation runs at [{_fmt(r['speedup'])} AR]({href(pair, r['row'])})** — {r['what']}, "
           f"{r['dtype']}, {r['weights']} weights, {_sample(r)}, wall clock ({r['source']}): the fastest policy "
           "anyone can run, timed against its own autoregressive run on the largest sample.")
    why = []
    ora = g[g["kind"].isin(("oracle", "ceiling"))]
    if len(ora):
        why.append(f"oracles and ceilings ({_range(ora)}) are hindsight bounds, not speeds")
    mod = g[g["basis"] == MODELLED]
    if len(mod):
        why.append(f"modelled figures ({_range(mod)}) combine measured costs by formula")
    rep = g[(g["basis"] == REPLAYED) & (g["kind"] == "replay")]
    if len(rep):
        why.append(f"replayed policies ({_range(rep)}) are priced by a cost model")
    other = _timed(df, pair)
    other = other[other["row"] != r["row"]]
    if len(other):
        reasons = []
        if dtypes := sorted(set(other["dtype"]) - {r["dtype"], "—"}):
            reasons.append(f"{', '.join(dtypes)} weights")
        if (other["_n"] < sample_size(r)).any():
            reasons.append("smaller samples")
        if (~other["_t0"]).any():
            reasons.append("sampling at T > 0")
        reasons.append("other policies" if (other["_n"] == sample_size(r)).any() else "")
        why.append(f"other timed runs ({_range(other)}) differ in {_join([x for x in reasons if x])}")
    return out + (" The rest differ because " + "; ".join(why) + "." if why else "")


def _join(xs: list[str]) -> str:
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " or " + xs[-1]


def _sample(r: Mapping[str, Any]) -> str:
    p, t = _count(r.get("prompts")), _count(r.get("tokens"))
    if p and t:
        return f"{int(p)} prompts × {int(t)} tokens"
    return f"{int(p)} prompts" if p else (f"{int(t)} tokens" if t else "sample not recorded")


def _range(g: pd.DataFrame) -> str:
    lo, hi = g["speedup"].min(), g["speedup"].max()
    return _fmt(lo) if abs(hi - lo) < 0.005 else f"{_fmt(lo)}–{_fmt(hi)}"


def table(df: pd.DataFrame, pair: str, marked: str | None = None) -> pd.DataFrame:
    """The pair's rows as the page shows them: the linked row first and marked, then by basis and speedup."""
    g = df[(df["pair"] == pair) & ((df["kind"] != CELL) | (df["row"] == (marked or "")))].copy()
    g["prompts × tokens"] = [_sample(r) for r in g.to_dict("records")]
    g["_first"] = g["row"] == (marked or "")
    g["_basis"] = g["basis"].map({WALL: 0, MODELLED: 1, REPLAYED: 2})
    g = g.sort_values(["_first", "_basis", "speedup"], ascending=[False, True, False])
    g.insert(0, "↗", ["▶ linked" if x else "" for x in g["_first"]])
    cols = ["↗", "what", "speedup", "kind", "basis", "dtype", "weights", "prompts × tokens", "source", "page", "row"]
    return g[cols].rename(columns=HEADERS | {"row": "row id"}).reset_index(drop=True)


# ---------------------------------------------------------------- links from other pages

FIGURE = re.compile(r"(?<![\[\d.])(\d+\.\d{2})× AR(?!\]\()")


def linkify(text: str, df: pd.DataFrame | None, pairs: str | Iterable[str], prefer: Iterable[str] = ()) -> str:
    """Every "N.NN× AR" in `text` that prints one of the pairs' rows becomes a link to that row. Rows
    named in `prefer` (ids) win when two rows print the same figure; a figure that is no row stays as
    it is (the browser test flags it)."""
    if df is None or df.empty or not text:
        return text
    pairs = [pairs] if isinstance(pairs, str) else list(pairs)
    prefer = list(prefer)
    g = df[df["pair"].isin(pairs) & ((df["kind"] != CELL) | df["row"].isin(prefer))]  # a grid's cell: its own table
    g = g.assign(_p=[prefer.index(r) if r in prefer else len(prefer) for r in g["row"]],
                 _q=[pairs.index(p) for p in g["pair"]]).sort_values(["_p", "_q"], kind="stable")
    by: dict[str, str] = {}
    for r in g.itertuples(index=False):
        by.setdefault(f"{r.speedup:.2f}", href(r.pair, r.row))
    return FIGURE.sub(lambda m: f"[{m.group(1)}× AR]({by[m.group(1)]})" if m.group(1) in by else m.group(0), text)


def figure_link(pair: str, row: str, x: float | None) -> str | None:
    """A table cell that is a speedup and its link at once: the URL carries the figure first, which a
    LinkColumn shows (display_text=FIGURE_TEXT) and which makes the column sort by value (the cells
    compare as text: 'speedups?x=0.64…' < 'speedups?x=1.02…'); None where there is no figure."""
    if x is None or pd.isna(x):
        return None
    return f"{PAGE}?x={x:05.2f}&{urlencode({'pair': pair, 'row': row}, quote_via=quote)}"


FIGURE_TEXT = r"x=0?([0-9]+\.[0-9]+)"  # LinkColumn(display_text=…): the figure in figure_link's URL


def link_figures(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with every column of figure links (figure_link's URLs) turned back into the figures they show:
    what a CSV of the table holds. Example: 'speedups?x=01.10&pair=…' → 1.1."""
    out = None
    for c in df.columns:
        vals = df[c].dropna()
        if len(vals) and all(isinstance(v, str) and v.startswith(f"{PAGE}?x=") for v in vals):
            out = df.copy() if out is None else out
            out[c] = [float(re.search(FIGURE_TEXT, v).group(1)) if isinstance(v, str) else None for v in df[c]]
    return df if out is None else out

