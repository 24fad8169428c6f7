"""Run many prompts through `engine.decode.decode` and write one trace — the consumer the CLI,
benchmarks and sweeps share. Progress is a tqdm bar over generated tokens; Ctrl-C leaves a valid
trace without a footer (the loader reports it as interrupted)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from tqdm import tqdm

from engine.decode import DecodeConfig, StepRecord, decode
from engine.core.load import software_versions
from engine.policies.base import WindowPolicy
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
    return {"name": source or lm.name, "vocab_size": lm.vocab_size, "dtype": str(lm.dtype).replace("torch.", ""),
            "device": str(lm.device),
            "reduced_vocab": int(lm.vocab_subset.numel()) if getattr(lm, "vocab_subset", None) is not None else None}


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


def run_requests(target, draft, policy, cfg: DecodeConfig, requests: list[Request], out_path,
                 eos_ids=(), decode_text: Callable[[list[int]], str] | None = None, progress: bool = True,
                 header_extra: dict[str, Any] | None = None, on_step: Callable[[StepRecord], None] | None = None,
                 policy_for: Callable[[Request], WindowPolicy] | None = None):
    """Decode every request into `out_path`; returns the footer summary.

    `policy_for` builds a policy per request (the hindsight oracle needs each prompt's future); it is
    called before the request's clock starts, and `policy` then only names the rule in the header."""
    header = make_header(target, draft, policy, cfg, requests, **(header_extra or {}))
    bar = tqdm(total=cfg.max_new_tokens * len(requests), unit="tok", disable=not progress, desc=header["policy"]["spec"])
    with TraceWriter(out_path, header) as w:
        for rid, r in enumerate(requests):
            w.write({"type": "request", "request_id": rid, "prompt_ids": list(r.prompt_ids), "prompt_text": r.text,
                     "category": r.category, "question_id": r.question_id})
            out: list[int] = []
            pol = policy_for(r) if policy_for is not None else policy
            t0 = time.perf_counter()
            finished = None
            for rec in decode(target, draft, r.prompt_ids, pol, cfg, eos_ids=eos_ids, request_id=rid):
                w.step(rec)
                out.extend(rec.emitted_tokens)
                bar.update(rec.emitted)
                finished = rec.finished
                if on_step is not None:
                    on_step(rec)
            bar.update(cfg.max_new_tokens - len(out))
            w.write({"type": "request_end", "request_id": rid, "output_ids": out,
                     "output_text": decode_text(out) if decode_text else "", "finished": finished,
                     "new_tokens": len(out), "wall_ms": round((time.perf_counter() - t0) * 1e3, 3)})
        bar.close()
    return w.summary
