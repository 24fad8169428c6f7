"""The results page's roofline section (engine.results renders it where result files carry the figures):

    section(files) -> list[str]     Markdown lines; [] when no file records a bandwidth

Two tables, each from the result files as written:
    per model and path   docs/results/roofline-*.json (`python -m engine roofline`): bytes per token, the
                         bandwidth, the roofline R = bandwidth ÷ bytes, and the decode-only and
                         prefill-included fractions of it (engine.bench.roofline)
    per bench / peers    every other file with `bandwidth_gb_per_s`: the greedy AR row and the fastest
                         greedy row of each path (overall), with their roofline fractions

Worked example of a line: `| AMD EPYC, avx512_bf16 | qwen2.5-coder-1.5b | bf16 | 3.09 GB | 25.0 GB/s |
8.09 | 7.20 | 0.89 | 0.85 | quiet | roofline-amd-epyc-9r14.json |`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def size(nbytes: float) -> str:
    """3.09e9 → '3.090 GB'; a tiny model's 82,000 → '0.082 MB' (decimal units, as bandwidths)."""
    return f"{nbytes / 1e9:.3f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.3f} MB"


def _f(v: Any, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def _busy(d: dict) -> str:
    b = d.get("busy")
    return "not recorded" if not b else (f"busy ({b['others_cores']:.2f} cores)" if b.get("busy") else "quiet")


def _load(path: Path) -> dict | None:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and d.get("bandwidth_gb_per_s") else None


def bandwidth_cell(d: dict) -> str:
    """The file's bandwidth; with probes beside every round, their median and range: '28.1 GB/s (24–58)'."""
    every = [p["gb_per_s"] for p in d.get("bandwidth_rounds") or []]
    if not every:
        return f"{d['bandwidth_gb_per_s']:.1f} GB/s"
    every += [d[k]["gb_per_s"] for k in ("bandwidth", "bandwidth_after") if isinstance(d.get(k), dict)]
    return f"{d['bandwidth_gb_per_s']:.1f} GB/s ({min(every):.0f}–{max(every):.0f})"


def decode_fraction_cell(r: dict) -> str:
    """A row's decode-only fraction; where the runs were paired with their own probes, also the one against the
    run's highest probe: '0.78 (0.41 vs highest)'."""
    cell = _f(r.get("decode_roofline_fraction"), ".2f")
    best = r.get("decode_roofline_fraction_best")
    return cell if best is None else f"{cell} ({best:.2f} vs highest)"


def roofline_lines(files: list[Path], machine) -> list[str]:
    out = []
    for p in files:
        d = _load(p)
        if d is None or d.get("kind") != "roofline":
            continue
        for r in d.get("rows", []):
            path = f"{r['path']} ({r['build']})" if r.get("build") else r["path"]  # files before it: no build
            out.append(f"| {machine(d.get('machine'))} | {r['model']} | {path} | {size(r['bytes_per_token'])} | "
                       f"{bandwidth_cell(d)} | {_f(r.get('roofline_tokens_per_s'), '.2f')} | "
                       f"{r['decode_tokens_per_s']:.2f} | {decode_fraction_cell(r)} | "
                       f"{_f(r.get('decode_roofline_fraction_kv'), '.2f')} | "
                       f"{_f(r.get('roofline_fraction'), '.2f')} | {_busy(d)} | [{p.name}](results/{p.name}) |")
    return out


def run_lines(files: list[Path]) -> list[str]:
    out = []
    for p in files:
        d = _load(p)
        if d is None or d.get("kind") == "roofline":
            continue
        rows = [r for r in d.get("rows", []) if r.get("roofline_fraction") is not None
                and r.get("task", "overall") == "overall" and r.get("temperature", 0.0) == 0.0]
        for key in dict.fromkeys(r.get("weights") or r.get("engine") or "" for r in rows):
            sel = [r for r in rows if (r.get("weights") or r.get("engine") or "") == key]
            ar = next((r for r in sel if r.get("config") == "ar"), None)
            fast = max((r for r in sel if r.get("config") != "ar"), key=lambda r: r["tokens_per_s"], default=None)
            for r in (ar, fast):
                if r is not None:
                    out.append(f"| [{p.name}](results/{p.name}) | {key or '–'} | `{r['config']}` | "
                               f"{r['tokens_per_s']:.2f} | {d['bandwidth_gb_per_s']:.1f} GB/s | "
                               f"{r['roofline_fraction']:.2f} | {_busy(d)} |")
    return out


def section(files: list[Path], machine=lambda m: m or "machine not recorded") -> list[str]:
    """The page's roofline section, or [] when no file records a bandwidth. `machine`: the page's summary
    of a machine description (engine.results.machine_summary)."""
    per_path, per_run = roofline_lines(files, machine), run_lines(files)
    if not per_path and not per_run:
        return []
    lines = ["## Memory roofline", "",
             "A one-token step reads every weight once, so bandwidth ÷ bytes per token is the fastest autoregressive "
             "decoding can go (`python -m engine roofline`; engine/bench/roofline.py). *Fraction* = measured "
             "tokens/s ÷ that roofline: decode-only, and with the prefill included; a speculative row can pass 1. "
             "*+ KV*: decode-only against the floor of the weights and the KV cache a step reads at the requests' "
             "mean context (files from before it was recorded: –). A shared host's bandwidth drifts (24–58 GB/s "
             "within minutes on one 2-core EPYC): files that probe beside every round compare each run with the "
             "bandwidth around it, show the probes' median and range, and the decode fraction against the highest "
             "probe too.", ""]
    if per_path:
        lines += ["| machine | model | path | bytes/token | bandwidth | roofline tok/s | decode tok/s | fraction (decode) "
                  "| fraction (decode, + KV) | fraction (incl. prefill) | machine load | result |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|",
                  *per_path, ""]
    if per_run:
        lines += ["Benchmark and peers runs that record the bandwidth (greedy, overall: AR and the fastest "
                  "configuration per path or engine; fraction against the path's target AR roofline):", "",
                  "| result | path / engine | config | tok/s | bandwidth | roofline fraction | machine load |",
                  "|---|---|---|---|---|---|---|", *per_run, ""]
    return lines
