"""The one request loop over `engine.decode.decode`, and the only code that writes a trace's
`request` / `request_end` records (through `TraceWriter.request` / `request_end`).

    RequestRun(target, draft, policy, cfg, request, …)   one request: iterate it for its StepRecords;
                                                         the CLI, the bench runner and the Live page
                                                         (which interleaves one per side) use it
    run_requests(target, draft, policy, cfg, requests, out_path, …)
                                                         every request into one trace file (CLI, sweeps)

`policy.for_request(ctx)` gives each request its policy before the request's clock starts (the
hindsight oracle computes its look-ahead there). `wall_ms` in `request_end` is wall-clock time spent
decoding the request: perf_counter around each step of `decode` (prefill included), on a
synchronised device. What the consumer does between steps — writing the trace, an interleaving Live
page's other sides — is not in it; it is never a sum of the steps' own t_* timings. Progress is a tqdm bar over
generated tokens; Ctrl-C leaves a valid trace without a footer (the loader reports it as interrupted)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from tqdm import tqdm

from engine.decode import DecodeConfig, StepRecord, decode
from engine.drafters.autoregressive import as_drafter
from engine.models.load import software_versions
from engine.measure import sync
from engine.hindsight import hindsight
from engine.policies.base import RequestContext, WindowPolicy
from engine.policies.pair_costs import PairBook, PairBooks
from engine.trace.format import TraceWriter


@dataclass(frozen=True)
class Request:
    prompt_ids: list[int]
    text: str = ""
    category: str = ""
    question_id: Any = None


def model_info(lm, source: str = "") -> dict[str, Any] | None:
    if lm is None:
        return None
    ctx = getattr(lm, "context", None)
    if ctx is not None and getattr(lm, "lm", None) is not None:  # a draft model read through a context window
        info = model_info(lm.lm, source)
        if ctx.window:
            info["context"] = {"window": ctx.window, "sink": ctx.sink}
        return info
    info = {"name": source or lm.name, "vocab_size": lm.vocab_size, "dtype": str(lm.dtype).replace("torch.", ""),
            "device": str(lm.device),
            "reduced_vocab": int(lm.vocab_subset.numel()) if getattr(lm, "vocab_subset", None) is not None else None}
    if hasattr(lm, "weights"):  # each model's own weights path (engine.kernels.quant): a pair may mix them
        info["weights"] = lm.weights
    return info


def make_header(target, draft, policy: WindowPolicy | None, cfg: DecodeConfig, requests: list[Request],
                **extra: Any) -> dict[str, Any]:
    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "target": model_info(target), "draft": model_info(draft),
        "policy": ({"name": policy.name, "spec": policy.spec, "params": policy.params} if draft is not None
                   else {"name": "autoregressive", "spec": "autoregressive", "params": {}}),
        "verifier": cfg.verifier, "sampling": cfg.sampling.to_dict(), "max_new_tokens": cfg.max_new_tokens,
        "prompts": [{"request_id": i, "question_id": r.question_id, "category": r.category}
                    for i, r in enumerate(requests)],
        "software": software_versions(), **extra,
    }


# The process's pair books (engine.policies.pair_costs): one per loaded (target, drafter) pair, weakly keyed on
# the target, so every request of a pair — across runs, configs and bench rotations in this process — prices
# with the same measured costs and pooled acceptance. The run owns them and hands each request its pair's
# book in RequestContext.book; a policy keeps no registry. The bench primes a pair's book (pair_book(...).prime).
BOOKS = PairBooks()


def pair_book(target, draft) -> PairBook:
    """The shared state of one loaded pair in this process (BOOKS)."""
    return BOOKS.of(target, draft)


def policy_for(policy: WindowPolicy | None, target, draft, cfg: DecodeConfig, prompt_ids: list[int],
               eos_ids=(), book: PairBook | None = None) -> WindowPolicy | None:
    """The policy of one request (`WindowPolicy.for_request`); call it before the request's clock. `book`:
    the pair's shared state (default: this process's book of the pair, `pair_book`)."""
    if policy is None or draft is None:
        return policy
    eos = tuple(eos_ids)
    lookahead = (hindsight(target, draft, list(prompt_ids), cfg.max_new_tokens, eos)
                 if policy.needs().lookahead else None)
    book = pair_book(target, draft) if book is None else book
    return policy.for_request(RequestContext(target, draft, list(prompt_ids), cfg.max_new_tokens, eos, lookahead,
                                             float(cfg.sampling.temperature), book,
                                             as_drafter(draft).prompt_tokens(len(prompt_ids))))


class RequestRun:
    """One request through `decode`: iterate it for its StepRecords, then read `output`, `finished`,
    `wall_s`, `steps` (written step dicts, or the records themselves with `defer_writes`).

    `policy` is this request's own (see `policy_for`). With a `writer`, the request record, each step
    and the request_end are written through it; `defer_writes` writes them all after the clock stops
    (file I/O is not the engine's cost: the bench). The clock starts and stops on a synchronised
    device and runs only inside this object's iteration (see the module doc)."""

    def __init__(self, target, draft, policy: WindowPolicy | None, cfg: DecodeConfig, request: Request,
                 request_id: int = 0, writer: TraceWriter | None = None, eos_ids=(),
                 decode_text: Callable[[list[int]], str] | None = None, defer_writes: bool = False) -> None:
        self.target, self.draft, self.policy, self.cfg, self.request = target, draft, policy, cfg, request
        self.request_id, self.writer, self.eos_ids, self.decode_text = request_id, writer, tuple(eos_ids), decode_text
        self.defer = defer_writes
        self.output: list[int] = []
        self.steps: list = []
        self.records: list[StepRecord] = []
        self.finished: str | None = None
        self.wall_s = 0.0
        self.done = False

    def _open(self) -> None:
        r = self.request
        self.writer.request(self.request_id, r.prompt_ids, r.text, r.category, r.question_id)

    def _close(self) -> None:
        text = self.decode_text(self.output) if self.decode_text else ""
        self.writer.request_end(self.request_id, self.output, self.finished, self.wall_s * 1e3, text)

    def __iter__(self) -> Iterator[StepRecord]:
        w = self.writer if not self.defer else None
        if w is not None:
            self._open()
        gen = decode(self.target, self.draft, self.request.prompt_ids, self.policy, self.cfg,
                     eos_ids=self.eos_ids, request_id=self.request_id)
        while True:
            sync(self.target)  # wall time on a device: from an idle queue to the step's kernels done
            t0 = time.perf_counter()
            rec = next(gen, None)
            sync(self.target)
            self.wall_s += time.perf_counter() - t0
            if rec is None:
                break
            self.output.extend(rec.emitted_tokens)
            self.finished = rec.finished
            self.records.append(rec)
            if w is not None:
                self.steps.append(w.step(rec))
            yield rec
        self.done = True
        if self.writer is not None:
            if self.defer:
                self._open()
                for rec in self.records:
                    self.steps.append(self.writer.step(rec))
            self._close()


def run_requests(target, draft, policy, cfg: DecodeConfig, requests: list[Request], out_path,
                 eos_ids=(), decode_text: Callable[[list[int]], str] | None = None, progress: bool = True,
                 header_extra: dict[str, Any] | None = None, on_step: Callable[[StepRecord], None] | None = None):
    """Decode every request into `out_path`; returns the footer summary. Each request gets its own
    policy from `policy.for_request` before its clock starts (the hindsight oracle's look-ahead)."""
    header = make_header(target, draft, policy, cfg, requests, **(header_extra or {}))
    bar = tqdm(total=cfg.max_new_tokens * len(requests), unit="tok", disable=not progress, desc=header["policy"]["spec"])
    with TraceWriter(out_path, header) as w:
        for rid, r in enumerate(requests):
            pol = policy_for(policy, target, draft, cfg, r.prompt_ids, eos_ids)
            run = RequestRun(target, draft, pol, cfg, r, rid, w, eos_ids, decode_text)
            for rec in run:
                bar.update(rec.emitted)
                if on_step is not None:
                    on_step(rec)
            bar.update(cfg.max_new_tokens - len(run.output))
        bar.close()
    return w.summary
