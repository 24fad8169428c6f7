"""The sweep worker (a Ray actor, `SweepWorker`): runs tasks on a model pair it keeps loaded, and
publishes each trace atomically.

    atomic      a worker writes `DIR/traces/.<id>.<attempt>.<nonce>.jsonl.tmp` and moves it onto
                `<id>.jsonl` (`publish`: a hard link, which never overwrites another attempt's trace;
                os.replace where links are unsupported), so a trace exists whole or not at all.
    resumable   a task whose trace exists, loads, is complete and carries its own id (`valid_trace`)
                is never run again.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from engine.bench.sweep_grid import AUTOREGRESSIVE, Task, _resolve_ref, load_plugins, trace_path


def valid_trace(path: str | os.PathLike, task_id: str):
    """The loaded trace when `path` is a complete, valid trace of `task_id`; None otherwise."""
    from engine.trace.format import TraceError, load_trace

    p = Path(path)
    if not p.is_file():
        return None
    try:
        t = load_trace(p)
    except (TraceError, OSError, ValueError):
        return None
    if not t.complete or (t.header.get("sweep") or {}).get("task_id") != task_id:
        return None
    return t


def publish(tmp: Path, final: Path) -> bool:
    """Move a finished temp trace onto its final name atomically; False if another attempt got there
    first. A hard link never overwrites, so two racing attempts (a worker the driver took for dead
    that was only unreachable) cannot both publish. Where the filesystem has no hard links, os.replace
    (atomic too; a race then leaves the last of two whole traces)."""
    try:
        os.link(tmp, final)
    except FileExistsError:
        tmp.unlink(missing_ok=True)
        return False
    except OSError:
        os.replace(tmp, final)
        return True
    tmp.unlink(missing_ok=True)
    return True


class SweepWorker:
    """Runs tasks; keeps the last `cache_pairs` loaded pairs. Wrapped with ray.remote by the driver."""

    def __init__(self, threads: int | None = None, device: str = "auto", cache_pairs: int = 2) -> None:
        import torch
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one per model load in every worker's log otherwise
        if threads:
            torch.set_num_threads(threads)
        self.device = device
        self.cache_pairs = cache_pairs
        self._pairs: dict[tuple, Any] = {}
        self.tasks_run = 0

    def ping(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname()}

    def _pair(self, task: Task, want_hidden: bool = False):
        from engine.models.load import check_pair, load_model

        key = (task.pair_key, want_hidden)
        if key in self._pairs:
            self._pairs[key] = self._pairs.pop(key)  # most recently used last
            return self._pairs[key]
        while len(self._pairs) >= self.cache_pairs:
            self._pairs.pop(next(iter(self._pairs)))
        from engine.models.pair_weights import parse

        dtype = task.config["dtype"]
        pw = parse(task.config.get("weights", "dense"))  # each model's own path (a mixed pair)
        target = load_model(_resolve_ref(task.models["target"]), dtype, self.device, role="target", weights=pw.target)
        draft = None
        if task.models["draft"] is not None:
            draft = load_model(_resolve_ref(task.models["draft"]), dtype, self.device, role="draft", target=target,
                               want_hidden=want_hidden, weights=pw.draft)
            check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
        self._pairs[key] = (target, draft)
        return target, draft

    def run(self, task: Task, out_dir: str, tmp_name: str) -> dict[str, Any]:
        from engine.decode import DecodeConfig
        from engine.drafters.modelfree import make_model_free
        from engine.models.load import eos_token_ids
        from engine.policies.base import parse_policy
        from engine.trace.prompts import encode
        from engine.run import Request, run_requests
        from engine.core.sampling import SamplingConfig

        load_plugins()
        final = trace_path(out_dir, task.task_id)
        info = self.ping()
        if valid_trace(final, task.task_id) is not None:  # written by an attempt that died after the rename
            return {"status": "present", **info}
        c = task.config
        ar = c["policy"] == AUTOREGRESSIVE
        policy = None if ar else parse_policy(c["policy"])
        # Policies that read draft hidden states (PACER) get a draft loaded with want_hidden.
        target, draft = self._pair(task, want_hidden=bool(policy is not None and policy.needs_hidden))
        # A model-free drafter is built fresh per task: suffix:corpus=1 learns from the requests it saw.
        target_lm = target.lm
        if not ar and c.get("drafter", "").startswith("eagle:"):  # the head verifies with its FeatureLM
            from engine.drafters.factory import make_drafter

            target_lm, draft_lm = make_drafter(c["drafter"], target.lm)
        else:
            draft_lm = (None if ar else make_model_free(c["drafter"], target.lm.vocab_size) if c.get("drafter")
                        else draft.lm)
        tok = target.tokenizer
        if tok is None:
            raise ValueError(f"target {c['target']!r} has no tokenizer; cannot encode text prompts")
        requests = [Request(encode(tok, p["text"], chat=c["chat"]), p["text"], p["category"], p["question_id"])
                    for p in task.prompts]
        cfg = DecodeConfig(max_new_tokens=c["max_new_tokens"], verifier=c["verifier"],
                           sampling=SamplingConfig(c["temperature"], c["top_k"], c["top_p"], c["seed"]))
        tmp = final.parent / tmp_name
        final.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        try:
            summary = run_requests(target_lm, draft_lm, policy, cfg, requests, tmp,
                                   eos_ids=eos_token_ids(target), decode_text=lambda ids: tok.decode(ids),
                                   progress=False,
                                   header_extra={"sweep": {"task_id": task.task_id, "config": c, **task.meta,
                                                           "worker": info},
                                                 "command": "python -m engine sweep"})
            published = publish(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if not published:
            return {"status": "present", **info}
        self.tasks_run += 1
        return {"status": "written", "summary": summary, "wall_s": time.perf_counter() - t0, **info}
