"""Which serving-engine report a file is, and the one way in for all of them.

    vllm       vLLM per-request metrics: offline records or saved OpenAI-API responses   engine.interop.vllm
    vllm-prom  a vLLM Prometheus text scrape (vllm:spec_decode_*)                         engine.interop.prometheus
    llamacpp   llama.cpp server responses (`timings`) or a llama-speculative-simple log   engine.interop.llamacpp
    llamacpp-speclog  a llama.cpp fork's --spec-log-file JSONL (one object per round)    engine.interop.speclog
    aiperf     AIPerf per-request records (profile_export.jsonl)                          engine.interop.aiperf
    llamacpp-stats  llama.cpp's `statistics …: #mean acc len, #acc rate/pos` lines       engine.interop.llamastats
    sglang     SGLang `meta_info` records                                                 engine.interop.sglang

`detect` reads the head of a file only (the Upload page calls it on every upload; a speclab trace,
a Spec-Bench answer file or a reference run is none of these and returns None). `loads_peer` turns
the bytes into a validated Trace in memory; `import_peer` writes it atomically (a bad file leaves no
trace behind). Every error is one line naming the file, record and field (PeerError, a TraceError).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from engine.interop import aiperf, llamacpp, llamastats, prometheus, sglang, speclog, vllm
from engine.interop.peer import PeerError, first_json, to_trace, write_trace
from engine.trace.format import Trace
from engine.trace.parse import gc_paused

@dataclass(frozen=True)
class Format:
    """One importer: its reader, how Upload describes it, one short example, and how it is detected —
    `json` tests a JSON file's first record, `text` a text file's first MiB. REGISTRY is the one list of
    formats: the command line's choices, the Upload page and detection all read it (in its order)."""

    name: str
    read: Callable[..., list[dict[str, Any]]]
    description: str
    example: str
    json: Callable[[Any], bool] | None = None
    text: Callable[[bytes], bool] | None = None


REGISTRY: tuple[Format, ...] = (
    Format("vllm", vllm.vllm_records,
           "vLLM per-request spec-decode metrics: offline records (request_id, prompt_token_ids, token_ids, "
           "spec_decode_metrics) or saved `vllm serve` responses (metrics.speculative_decoding)",
           '{"request_id": "0", "prompt_token_ids": [151644, 872], "token_ids": [40, 1079, 13], '
           '"spec_decode_metrics": {"mean_acceptance_length": 2.0, "draft_acceptance_rate": 0.5, '
           '"acceptance_histogram": [0, 1, 0], "num_spec_steps": 1, "num_accepted_draft_tokens": 1, '
           '"num_draft_tokens": 2, "num_spec_tokens": 2, "per_step_accepted": [1], "per_step_drafted": [2]}}',
           json=lambda d: vllm.kind_of(d) is not None),
    Format("vllm-prom", prometheus.scrape_records,
           "a vLLM Prometheus scrape (/metrics text with vllm:spec_decode_* counters)",
           'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 28.0\n'
           'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 112.0\n'
           'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 19.0\n'
           'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 12.0\n'
           '… one line per position', text=prometheus.is_scrape),
    Format("llamacpp-speclog", speclog.speclog_records,
           "a llama.cpp fork's --spec-log-file JSONL: one object per speculation round (draft tokens "
           "with p, entropy and top-k; n_accepted, rej_pos, target_id; draft and verify µs)",
           '{"ts_ms": 1703001234567, "slot_id": 0, "prompt_pos": 125, "round_id": 42, "draft": {"n": 2, '
           '"stop_reason": "n_max", "tokens": [{"pos": 0, "id": 1234, "p": 0.85, "entropy": 0.45, '
           '"top_k": [[1234, 0.85], [5678, 0.08]]}, {"pos": 1, "id": 99, "p": 0.4, "entropy": 1.2, '
           '"top_k": []}]}, "verify": {"n_accepted": 1, "rej_pos": 1, "target_id": 7890}, '
           '"timing": {"t_draft_us": 12500, "t_verify_us": 45000}}', json=speclog.is_round),
    Format("aiperf", aiperf.aiperf_records,
           "AIPerf per-request records (profile_export.jsonl, --export-level records): metadata, metrics "
           "{value, unit} and spec_decode_acceptance (histogram, counts, per-step arrays when detailed)",
           '{"metadata": {"x_request_id": "r-0", "benchmark_phase": "profiling", "request_start_ns": '
           '1764892800000000000}, "metrics": {"time_to_first_token": {"value": 41.5, "unit": "ms"}, '
           '"request_latency": {"value": 702.0, "unit": "ms"}}, "error": null, "spec_decode_acceptance": '
           '{"engine": "vllm", "mean_acceptance_length": 2.5, "draft_acceptance_rate": 0.5, '
           '"acceptance_histogram": {"1": 1, "2": 1}, "num_accepted_draft_tokens": 3, "num_draft_tokens": 6, '
           '"num_spec_steps": 2, "num_spec_tokens": 3, "completion_tokens": 6}}', json=aiperf.is_record),
    Format("llamacpp", llamacpp.llamacpp_records,
           "llama.cpp server responses (timings.draft_n / draft_n_accepted) or a llama-speculative-simple log",
           '{"content": "…", "stop_type": "limit", "timings": {"prompt_n": 40, "prompt_ms": 610.2, '
           '"predicted_n": 48, "predicted_ms": 3480.5, "draft_n": 52, "draft_n_accepted": 29}}',
           json=llamacpp.is_server_record, text=llamacpp.is_log),
    Format("llamacpp-stats", llamastats.stats_records,
           "llama.cpp's speculative statistics lines (llama-server -lv 4: #calls(b,g,a), #gen/#acc tokens, "
           "#mean acc len, #acc rate/pos): totals per request, per-position counts where the rates pin them",
           "statistics draft-mtp: #calls(b,g,a) = 1 203 203, #gen drafts = 203, #acc drafts = 172, "
           "#gen tokens = 405, #acc tokens = 308, #mean acc len = 2.52, #acc rate/pos = (0.847, 0.670), "
           "dur(b,g,a) = 0.004, 1014.965, 0.448 ms", text=llamastats.is_stats),
    Format("sglang", sglang.sglang_records,
           "SGLang /generate responses (meta_info.spec_verify_ct, completion_tokens)",
           '{"text": "…", "meta_info": {"prompt_tokens": 40, "completion_tokens": 48, "spec_verify_ct": 21, '
           '"finish_reason": {"type": "length"}, "e2e_latency": 2.9}}', json=sglang.is_sglang_record),
)
FORMATS = {f.name: f for f in REGISTRY}
# Views of the registry (the command line's choices, the Upload page's list and examples).
READERS = {f.name: f.read for f in REGISTRY}
DESCRIPTIONS = {f.name: f.description for f in REGISTRY}
EXAMPLES = {f.name: f.example for f in REGISTRY}


def detect(data: bytes) -> str | None:
    """The peer format of a file, or None (a trace, an answer file, anything else). Give it the whole
    file: JSON is told by its first record, read to that record's end however long it is (a first
    record over any fixed head would otherwise go undetected); text formats by their first MiB."""
    data = data.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark: the readers drop it too
    if data[:4096].lstrip()[:1] in (b"{", b"["):  # JSON: a record's keys say whose it is
        first = first_json(data)
        return next((f.name for f in REGISTRY if f.json is not None and f.json(first)), None)
    head = data[: 1 << 20]
    return next((f.name for f in REGISTRY if f.text is not None and f.text(head)), None)


def records(fmt: str, data: bytes, name: str, command: str = "") -> list[dict[str, Any]]:
    if fmt not in READERS:
        raise PeerError(f"{name}: unknown format {fmt!r} (one of {', '.join(READERS)})")
    return READERS[fmt](data, name, command=command)


def loads_peer(data: bytes, name: str, fmt: str | None = None) -> Trace:
    """A peer report's bytes → a validated Trace (the Upload page's path; nothing touches disk)."""
    name = Path(name).name
    fmt = fmt or detect(data)
    if fmt is None:
        raise PeerError(f"{name}: not a report of a known format ({', '.join(FORMATS)})")
    with gc_paused():
        return to_trace(records(fmt, data, name), name)


def import_peer(fmt: str, src: str | os.PathLike, out: str | os.PathLike, command: str = "",
                before: str | os.PathLike | None = None, model: str | None = None) -> Trace:
    """`_import_peer` with the cyclic collector paused (a large report becomes millions of records)."""
    with gc_paused():
        return _import_peer(fmt, src, out, command, before, model)


def _import_peer(fmt: str, src: str | os.PathLike, out: str | os.PathLike, command: str = "",
                 before: str | os.PathLike | None = None, model: str | None = None) -> Trace:
    """Write `src` (a `fmt` report) as a trace at `out`, or raise PeerError and write nothing.
    `before` / `model`: a Prometheus scrape taken before the run (the run is the difference) and the
    model to read from a multi-model scrape (vllm-prom only)."""
    p = Path(src)
    if not p.is_file():
        raise PeerError(f"{p.name}: no such file")
    data = p.read_bytes()
    got = detect(data)
    if got is not None and got != fmt:
        raise PeerError(f"{p.name}: this is a {got} report, not {fmt} (python -m engine import {got} …)")
    if (before is not None or model is not None) and fmt != "vllm-prom":
        raise PeerError(f"{p.name}: --before and --model are for Prometheus scrapes (vllm-prom)")
    if fmt == "vllm-prom":
        b = Path(before) if before is not None else None
        if b is not None and not b.is_file():
            raise PeerError(f"{b.name}: no such file")
        recs = prometheus.scrape_records(data, p.name, model, command, before=b.read_bytes() if b else None,
                                         before_name=b.name if b else "before")
        return write_trace(recs, out, source=p.name)
    return write_trace(records(fmt, data, p.name, command), out, source=p.name)
