"""Reference runs: everything needed to replay any window policy offline, from one target run.

Notation: p = target, q = draft, γ = window (drafted tokens per target call), y_0..y_{N-1} = the
target's output, position j = the prediction of y_j from prompt + y_<j.

Greedy (T = 0). The output does not depend on the window, so one target run (the decode generator
with draft=None) fixes y. One teacher-forced draft pass over prompt + y gives d_j = argmax q_j and

    match_j = [d_j == y_j],     A(j) = match_j · (1 + A(j+1)),  A(N) = 0

A(j) is the accepted run length (accepted, i.e. excluding the bonus token) of a step that starts
at j with an unlimited window. A step that drafts past its first mismatch m = j + A(j) feeds the
draft its own token d_m, so the signals there are not on the teacher-forced path: for every
mismatch m we also record the draft's free-running "tail" e_1..e_T after d_m (T = max_window − 1),
with its confidence and entropy. With that, every policy that looks only at draft signals and
accepted counts replays exactly (engine.offline.replay).

Sampling (T > 0). A target sample y (same generator) and teacher-forced passes of both models give
β_j = Σ_x min(p_j(x), q_j(x)), the probability that a draft token at j is accepted; the
simulator turns these into expected values (Leviathan's α, per position instead of i.i.d.).

Timings: draft ms per drafted token and target ms for a forward of k tokens (k = γ+1 for window γ),
k = 1..max_window+1, measured on the actual pair with the first prompt as context.

The file format and its validation: engine.trace.reference_file (torch-free). The target run
and the teacher-forced pass are engine.hindsight's, shared with the hindsight oracle.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from engine.hindsight import accept_runs, target_run, teacher_forced
from engine.trace.reference_file import SCHEMA, VERSION
from engine.trace.prompts import task_of

# torch (and the decode loop, which needs it) is imported inside the building functions only: loading
# and validating a reference file is plain JSON, so the app's analysis pages never pay for torch.
if TYPE_CHECKING:
    from engine.core.sampling import SamplingConfig


def _sampling(**kw) -> "SamplingConfig":
    from engine.core.sampling import SamplingConfig

    return SamplingConfig(**kw)


@dataclass(frozen=True)
class ReferenceConfig:
    max_new_tokens: int = 128  # same default as decode, so a reference replays the default decode runs
    sampling: SamplingConfig = field(default_factory=_sampling)  # greedy: exact replay
    max_window: int = 16  # longest window replayed exactly (tails have max_window − 1 tokens)
    timing_repeats: int = 5  # median of 5 per k: stable on a shared CPU, ~1 s for a 135M target
    measure_timings: bool = True  # off for tests or when a user-set cost model is used

    def __post_init__(self) -> None:
        if not 1 <= self.max_window <= 64:
            raise ValueError(f"max_window must be in [1, 64], got {self.max_window}")
        if self.timing_repeats < 1:
            raise ValueError(f"timing_repeats must be >= 1, got {self.timing_repeats}")


# ------------------------------------------------------------------ building


def _tails(draft, prompt_len: int, mismatches: list[int], d_tok: list[int], n_tail: list[int]) -> list[dict]:
    """Free-running draft after each mismatch m (cache must hold prompt + y; visited in decreasing m)."""
    from engine.core.sampling import entropy

    out = []
    for m, n in sorted(zip(mismatches, n_tail), reverse=True):
        draft.crop(prompt_len + m)
        toks, qs, hs = [], [], []
        last = d_tok[m]
        for _ in range(n):
            probs = draft.extend([last])[-1].softmax(-1)
            last = int(probs.argmax())
            toks.append(last)
            qs.append(round(float(probs[last]), 7))
            hs.append(round(float(entropy(probs)), 6))
        out.append({"pos": m, "tokens": toks, "q_top": qs, "entropy": hs})
    return sorted(out, key=lambda t: t["pos"])


def reference_request(target, draft, prompt: list[int], cfg: ReferenceConfig, eos_ids=(),
                      request_id: int = 0, known: dict[str, Any] | None = None) -> dict[str, Any]:
    """One request record: the target run (decode, draft=None) plus the draft's teacher-forced pass.

    `known` (greedy only) supplies a target run already made — an autoregressive trace's request
    (`ar_runs_from_trace`): output_ids, finished, target_ms, target_step_ms — so it is not repeated."""
    import torch

    from engine.core.sampling import entropy, probs_from_logits
    from engine.measure import timed_ms

    sc = cfg.sampling
    if known is not None:
        if not sc.greedy:
            raise ValueError("a recorded target run can stand in for the reference's own only when greedy")
        y = list(known["output_ids"])[: cfg.max_new_tokens]
        if len(y) < cfg.max_new_tokens and known["finished"] != "eos":
            raise ValueError(f"the recorded run of request {request_id} stopped at {len(y)} tokens without EOS: "
                             f"too short for max_new_tokens={cfg.max_new_tokens}")
        full = len(known["output_ids"])
        # cut before its end: ended by this budget, whatever ended the recorded run
        finished = known["finished"] if full == len(y) else "max_new_tokens"
        # the recorded wall time, pro rata when the run went past this budget
        t_target, t_step = known["target_ms"] * len(y) / max(1, full), known["target_step_ms"]
    else:
        steps: list = []
        t_target = timed_ms(lambda: steps.extend(target_run(target, prompt, cfg.max_new_tokens, sc, eos_ids,
                                                            request_id)), target)
        y = [t for s in steps for t in s.emitted_tokens]
        finished, t_step = steps[-1].finished, statistics.median(s.t_verify_ms for s in steps)
    n = len(y)
    dlog = teacher_forced(draft, prompt, y)
    soft = dlog.softmax(-1)  # the draft's raw confidence, as the decode loop shows it to policies
    d_tok = soft.argmax(-1).tolist()
    idx = torch.arange(n)
    rec: dict[str, Any] = {
        "type": "request", "request_id": request_id, "prompt_ids": list(prompt), "output_ids": y,
        "finished": finished, "target_ms": round(t_target, 3),
        # median single-token target forward during the run: a cross-check of the header's t(1)
        "target_step_ms": round(t_step, 4),
        "draft_argmax": d_tok,
        "q_top": [round(x, 7) for x in soft[idx, torch.tensor(d_tok, dtype=torch.long)].tolist()] if n else [],
        "q_target": [round(x, 7) for x in soft[idx, torch.tensor(y, dtype=torch.long)].tolist()] if n else [],
        "entropy": [round(x, 6) for x in entropy(soft).tolist()],
    }
    if sc.greedy:
        match = [int(a == b) for a, b in zip(d_tok, y)]
        rec["accept_run"] = accept_runs(match)
        mism = [j for j in range(n) if not match[j]]
        # A step drafting past m needs at most max_new_tokens − m − 2 tail tokens (cap ≤ remaining − 1).
        n_tail = [max(0, min(cfg.max_window - 1, cfg.max_new_tokens - m - 2)) for m in mism]
        rec["tails"] = _tails(draft, len(prompt), mism, d_tok, n_tail)
    else:
        q = probs_from_logits(dlog, sc)
        p = probs_from_logits(teacher_forced(target, prompt, y), sc)
        rec["beta"] = [round(min(1.0, x), 7) for x in torch.minimum(p, q).sum(-1).tolist()]
        rec["q_target"] = [round(x, 7) for x in q[idx, torch.tensor(y, dtype=torch.long)].tolist()] if n else []
        rec["entropy"] = [round(x, 6) for x in entropy(q).tolist()]
    return rec


def ar_runs_from_trace(path) -> dict[Any, dict[str, Any]]:
    """Greedy autoregressive runs of a trace, by question id (else request id), for `known=`."""
    from engine.trace.format import load_trace

    t = load_trace(path)
    if (t.header.get("draft") is not None or float((t.header.get("sampling") or {}).get("temperature", 0)) != 0):
        raise ValueError(f"{Path(path).name}: not a greedy autoregressive trace")
    out: dict[Any, dict[str, Any]] = {}
    for rid, end in t.ends.items():
        req = t.requests[rid]
        steps = [s for s in t.steps if s["request_id"] == rid]
        key = req.get("question_id") if req.get("question_id") is not None else rid
        out[key] = {"prompt_ids": req["prompt_ids"], "output_ids": end["output_ids"], "finished": end["finished"],
                    "target_ms": end["wall_ms"], "target_step_ms": statistics.median(s["t_verify_ms"] for s in steps)}
    return out


def measure_timings(target, draft, context: list[int], max_tokens: int = 17, repeats: int = 5) -> dict[str, Any]:
    """Median wall ms: target forward of k = 1..max_tokens tokens, and one draft token, at this context."""
    from engine.measure import forward_curve

    ctx = list(context) if len(context) > 1 else list(context) * 2
    curve = forward_curve(target, ctx, range(1, max_tokens + 1), repeats)
    # index k−1: one forward of k tokens (window γ = k − 1)
    return {"context_len": len(ctx), "repeats": repeats,
            "target_ms_by_tokens": [round(curve[k], 4) for k in range(1, max_tokens + 1)],
            "draft_ms_per_token": round(forward_curve(draft, ctx, (1,), 4 * repeats)[1], 4)}


def fingerprint(lm) -> str:
    """Short sha256 of a model's weights, so a reference can be matched to the exact checkpoint
    (a retrained draft under the same name gives different A(j))."""
    import hashlib

    model = getattr(lm, "model", None)
    if model is None:
        return f"{getattr(lm, 'name', type(lm).__name__)}"
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().float().contiguous().cpu().numpy().tobytes()[:1 << 16])
    return h.hexdigest()[:16]


def build_reference(target, draft, prompts: list[dict], cfg: ReferenceConfig, out_path, eos_ids=(),
                    header_extra: dict[str, Any] | None = None, progress: bool = True) -> Path:
    """Write a reference file. `prompts`: dicts with prompt_ids and optional category, question_id, text."""
    from engine.models.load import software_versions
    from engine.run import model_info

    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"draft vocabulary ({draft.vocab_size}) differs from the target's ({target.vocab_size})")
    if not prompts:
        raise ValueError("no prompts")
    timings = (measure_timings(target, draft, prompts[0]["prompt_ids"], cfg.max_window + 1, cfg.timing_repeats)
               if cfg.measure_timings else None)
    header = {"type": "header", "schema": SCHEMA, "version": VERSION,
              "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "mode": "greedy" if cfg.sampling.greedy else "sampling",
              "target": model_info(target), "draft": model_info(draft), "sampling": cfg.sampling.to_dict(),
              "fingerprints": {"target": fingerprint(target), "draft": fingerprint(draft)},
              "max_new_tokens": cfg.max_new_tokens, "max_window": cfg.max_window, "timings": timings,
              "software": software_versions(), **(header_extra or {})}
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(header, allow_nan=False) + "\n")
        f.flush()  # a reader peeking at a run in progress sees the schema at once
        for rid, pr in enumerate(tqdm(prompts, desc="reference", unit="req", disable=not progress)):
            rec = reference_request(target, draft, list(pr["prompt_ids"]), cfg, eos_ids, rid, pr.get("known"))
            cat = str(pr.get("category") or "")
            rec.update(category=cat, task=task_of(cat), question_id=pr.get("question_id"),
                       prompt_text=pr.get("text", ""))
            f.write(json.dumps(rec, allow_nan=False) + "\n")
            f.flush()
        f.write(json.dumps({"type": "footer", "requests": len(prompts)}) + "\n")
    return path
