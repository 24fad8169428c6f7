"""What every bench result records about the machine it ran on: the read bandwidth, the bytes a one-token
step of each model reads, each row's fraction of the memory roofline, and whether another process held a
core meanwhile. The CLIs (bench, peers, costs) call these; the arithmetic is engine.bench.roofline.

    check_pair_paths(paths, draft, dtype, device)   every path of the run refused or its fallback said in one
                                                    line (engine.models.pair_weights), before any model loads
    probe(mib, threads) -> Bandwidth | None         the bandwidth probe (None with mib = 0)
    record(result, pairs, bandwidth, busy) -> dict  the result with `bandwidth`, `bytes_per_token`, `busy`, and
                                                    each row's `roofline_fraction` (+ `decode_roofline_fraction`)
    summary_line(result) -> str                     one line: bandwidth, each path's AR fraction, busy or quiet

A row's fraction is its tokens/s against the AR roofline of its path's *target*: bandwidth ÷ the target's
bytes per token. Worked example: a bench on the dense path at 10 GB/s whose target reads 3.09 GB a token
has an AR roofline of 3.24 tokens/s; its AR row at 2.80 tokens/s records 0.86, a fixed:2 row at 4.40
tokens/s records 1.36 — past the AR floor, as speculative decoding should be.
"""

from __future__ import annotations

from typing import Any

from engine.bench import bandwidth as bw_probe
from engine.bench.roofline import annotate, bytes_per_token, fraction


def check_pair_paths(paths: list, draft: str | None, dtype: str = "auto", device: str = "cpu") -> None:
    """Refuse (ValueError, one line) a path this machine cannot run, or a draft path given to a drafter with
    no weights of its own; print each fallback once. `paths`: engine.models.pair_weights.PairWeights."""
    from engine.models.pair_weights import announce, refusal
    from engine.drafters.factory import drafter_kind

    kind = drafter_kind(draft)
    for pw in paths:
        for w in dict.fromkeys((pw.target, pw.draft)):
            why = refusal(w, dtype, device)
            if why:
                raise ValueError(why)
        if pw.mixed and kind not in ("model", "phrase"):
            raise ValueError(f"--weights {pw.label}: " + ("there is no draft" if kind == "none" else
                                                          f"the {kind} drafter {draft} has no weights of its own"))
    for pw in paths:
        for w in dict.fromkeys((pw.target, pw.draft if kind in ("model", "phrase") else pw.target)):
            announce(w, dtype, device)


def probe(mib: int, threads: int | None = None) -> bw_probe.Bandwidth | None:
    """The read bandwidth over `mib` MiB on `threads` (default: torch's current count); None for mib = 0."""
    if not mib:
        return None
    if mib < 0:
        raise ValueError(f"--bandwidth-mib must be ≥ 0, got {mib}")
    import torch

    return bw_probe.measure(bw_probe.BandwidthConfig(nbytes=mib * 2**20, threads=threads or torch.get_num_threads()))


def _model_bytes(lm) -> dict[str, int] | None:
    from engine.bench.runner import _forward_lm

    inner = _forward_lm(lm)
    if inner is None or not hasattr(inner, "model"):
        return None
    return bytes_per_token(inner).to_dict()


def record(result: dict[str, Any], pairs: list[tuple[Any, Any]], bandwidth: bw_probe.Bandwidth | None,
           busy: Any = None) -> dict[str, Any]:
    """`result` (a bench result: rows with tokens_per_s, `weights` on rows of several paths) with the
    machine's bandwidth, each path's bytes per token (target and draft) and each row's roofline fraction.
    `pairs`: (target LM, drafter) per path, in the run's order (the first is the rows' default path)."""
    from engine.bench.bench import path_label

    by_path = {path_label(t, d): {"target": _model_bytes(t), "draft": _model_bytes(d)} for t, d in pairs}
    gb = bandwidth.gb_per_s if bandwidth is not None else None
    target_bytes = {w: b["target"]["bytes_per_token"] for w, b in by_path.items() if b["target"]}
    out = dict(result, bandwidth=bandwidth.to_dict() if bandwidth is not None else None, bandwidth_gb_per_s=gb,
               bytes_per_token=by_path,
               rows=annotate(result.get("rows", []), target_bytes, gb, default_path=next(iter(by_path), "dense")))
    if busy is not None:
        out["busy"] = busy.to_dict()
    return out


def summary_line(result: dict[str, Any]) -> str:
    """'read bandwidth 10.0 GB/s; AR at 0.86 of the roofline (dense) …; machine quiet …' (what is known)."""
    gb = result.get("bandwidth_gb_per_s")
    parts = [f"read bandwidth {gb:.1f} GB/s" if gb else "bandwidth not measured"]
    for r in result.get("rows", []):
        if r.get("config") == "ar" and r.get("task") == "overall" and r.get("roofline_fraction") is not None:
            parts.append(f"AR at {r['roofline_fraction']:.2f} of the roofline ({r.get('weights', 'one path')}, "
                         f"T = {r['temperature']:g})")
    b = result.get("busy")
    if b:
        parts.append(("BUSY: other processes held " if b["busy"] else "quiet: others held ")
                     + f"{b['others_cores']:.2f} cores")
    return "; ".join(parts)


def peer_fractions(rows: list[dict[str, Any]], bytes_by_engine: dict[str, int | None],
                   bandwidth: bw_probe.Bandwidth | None) -> list[dict[str, Any]]:
    """Peers rows with `roofline_fraction` per engine (each engine's own target bytes per token)."""
    gb = bandwidth.gb_per_s if bandwidth is not None else None
    return [dict(r, roofline_fraction=fraction(r.get("tokens_per_s"), bytes_by_engine.get(r["engine"]), gb))
            for r in rows]
