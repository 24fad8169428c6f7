"""The report of a block-drafter objective comparison: per objective, mean ± std over seeds of
τ_offline / τ_online, and paired differences against the DFlash baseline (same seed = same drafter
init and anchors): mean, paired-t 95% CI and a bootstrap 95% CI over seeds.

Reads what training (engine/train/dpace/fit.py: final.json) and online evaluation
(engine/train/dpace/eval.py: online.json, speed.json) left in each run directory.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

from engine.trace.jsonio import write_json_atomic


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


def collect(runs: Path, block_size: int, prefix: str = "") -> list[dict]:
    """final.json (+ online.json) of every finished run of a block size (Qwen runs: prefix "qwen-")."""
    rows = []
    for d in sorted(runs.glob(f"{prefix}B{block_size}-*")):
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
    from engine.train.dpace.objectives import dflash_gamma

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


def write_results(runs: Path, block_size: int, out: Path, prefix: str = "", extra: dict | None = None) -> dict:
    """Copy training traces into `out/traces/`, write `out/summary.json` and `out/summary.md`."""
    rows = collect(runs, block_size, prefix)
    summary = summarize(rows)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    for d in sorted(runs.glob(f"{prefix}B{block_size}-*")):
        if (d / "final.json").is_file():
            shutil.copyfile(d / "trace.jsonl", out / "traces" / f"{d.name}.jsonl")
    res = {"block_size": block_size, "runs": rows, "summary": summary,
           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}
    write_json_atomic(res, out / "summary.json")
    (out / "summary.md").write_text(markdown_table(summary) + "\n")
    return res
