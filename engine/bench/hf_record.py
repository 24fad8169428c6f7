"""Record HF transformers' assisted generation, `generate(..., assistant_model=…)`, as a speclab trace.

HF runs its draft-verify loop inside `generate` and reports nothing per step. For the duration of
one call the recorder wraps the target's `_get_candidate_generator`, and gives the candidate
generator it returns two instance-level hooks (transformers itself is not modified or forked):

    get_candidates(x)                  → the draft block d_1..d_γ and the draft's logits (→ q);
                                         HF's window for the step is its `num_assistant_tokens`
    update_candidate_strategy(x, p, n) → after verification: the target's processed logits over
                                         the block (→ p) and n = HF's accepted count; x now holds
                                         the emitted tokens

Step fields (docs/trace-format.md): window_cap = min(num_assistant_tokens, the length budget) —
HF's choice; policy_fields keep `num_assistant_tokens` as HF held it and `num_assistant_tokens_next`,
so the "heuristic" schedule (+2 after a full accept, −1 otherwise, floor 1) can be read off the
trace. accepted = drafts that match the emitted prefix (HF's own n, after its EOS cut, is kept as
`hf_num_matches`). accept_probs h_i: greedy 1 on a match with the target's argmax, else 0; sampling
min(1, p_i(d_i) / q_i(d_i)), the rule HF's `_speculative_sampling` applies.

Timing: t_draft_ms = the get_candidates call; t_verify_ms = from its return to the strategy update
(target forward, HF's acceptance rule, cache crop). HF fuses the prompt prefill into step 0's draft
and verify calls, so t_prefill_ms is 0 and step 0 carries the prefill. request_end.wall_ms is the
whole `generate` call, which also counts HF's bookkeeping between steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Callable

import torch

from engine.decode import StepRecord
from engine.measure import sync


@dataclass
class Recorded:
    sequences: torch.Tensor  # what generate() returned
    output_ids: list[int]  # the new tokens
    steps: list[StepRecord]
    wall_ms: float


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    return -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)


class _Hooks:
    """Per-step state between HF's two candidate-generator calls."""

    def __init__(self, target, do_sample: bool, request_id: int) -> None:
        self.target, self.do_sample, self.request_id = target, do_sample, request_id
        self.steps: list[StepRecord] = []
        self._pending: dict[str, Any] | None = None

    def wrap(self, cg) -> None:
        get, update = cg.get_candidates, cg.update_candidate_strategy

        def get_candidates(input_ids, *args, **kwargs):
            n_assist = int(getattr(cg, "num_assistant_tokens", 0) or 0)
            limit = getattr(cg, "main_model_max_length", None)
            cap = n_assist if limit is None else max(0, min(n_assist, limit - input_ids.shape[-1] - 1))
            sync(self.target)
            t0 = time.perf_counter()
            cand, logits = get(input_ids, *args, **kwargs)
            sync(self.target)
            self._pending = {"t0": t0, "t1": time.perf_counter(), "cur_len": input_ids.shape[-1], "cap": cap,
                             "n_assist": n_assist, "cand": cand, "logits": logits}
            return cand, logits

        def update_candidate_strategy(input_ids, scores, num_matches, *args, **kwargs):
            sync(self.target)
            t2 = time.perf_counter()
            self._record(input_ids, scores, int(num_matches), t2)
            out = update(input_ids, scores, num_matches, *args, **kwargs)
            self.steps[-1].policy_fields["num_assistant_tokens_next"] = int(getattr(cg, "num_assistant_tokens", 0) or 0)
            return out

        cg.get_candidates = get_candidates
        cg.update_candidate_strategy = update_candidate_strategy

    def _record(self, input_ids, scores, n_matches: int, t2: float) -> None:
        st, self._pending = self._pending, None
        S = st["cur_len"]
        drafts = st["cand"][0, S:].tolist()
        emitted = input_ids[0, S:].tolist()
        g = len(drafts)
        q = p = h = ent = ()
        if g:
            d = torch.tensor(drafts, device=scores.device)
            logp = torch.log_softmax(scores[0, :g].float(), -1)
            p_d = logp[torch.arange(g, device=d.device), d].exp()
            if st["logits"] is not None:
                logq = torch.log_softmax(st["logits"][0, :g].float().to(scores.device), -1)
                q_d = logq[torch.arange(g, device=d.device), d].exp()
                ent = tuple(_entropy(logq).tolist())
            else:  # candidate generators without logits (prompt lookup) have no q
                q_d, ent = torch.ones(g), tuple([0.0] * g)
            if self.do_sample:
                h = tuple(torch.clamp(p_d.cpu() / q_d.cpu().clamp_min(1e-30), max=1.0).tolist())
            else:
                h = tuple((d == logp.argmax(-1)).float().tolist())
            q, p = tuple(q_d.tolist()), tuple(p_d.tolist())
        acc = 0
        while acc < min(g, len(emitted)) and emitted[acc] == drafts[acc]:
            acc += 1
        full = len(emitted) == acc + 1
        fields = {"num_assistant_tokens": st["n_assist"], "hf_num_matches": n_matches}
        last = emitted[-1] if full else None
        if not full and scores.shape[1] > acc:
            # Cut at EOS / the length limit before HF's own correction or bonus token: HF drops it
            # unseen. The format needs one; the target's argmax there is what greedy decoding takes
            # (under sampling it is a stand-in, flagged as such).
            last = int(scores[0, acc].argmax())
            fields["final_token_unobserved"] = True
        self.steps.append(StepRecord(
            request_id=self.request_id, step=len(self.steps), context_len=S, window_cap=st["cap"],
            draft_tokens=tuple(drafts), q_draft=q, p_target=p, accept_probs=h, draft_entropy=ent, accepted=acc,
            emitted_tokens=tuple(emitted), correction=last if acc < g else None,
            bonus=last if acc == g else None, stop_reason="cap" if g >= st["cap"] else "policy",
            t_draft_ms=(st["t1"] - st["t0"]) * 1e3, t_verify_ms=(t2 - st["t1"]) * 1e3,
            policy_fields=fields))


def record_assisted(target_model, assistant_model, input_ids: torch.Tensor, gen_kwargs: dict[str, Any] | None = None,
                    writer=None, request_id: int = 0, prompt_text: str = "", category: str = "",
                    question_id: Any = None, decode_text: Callable[[list[int]], str] | None = None) -> Recorded:
    """`target_model.generate(input_ids, assistant_model=assistant_model, **gen_kwargs)`, recorded.

    Returns what generate returned plus one StepRecord per verify call; with a TraceWriter
    (engine.trace.format; header from `hf_header`) also writes the request, its steps and its end."""
    kw = dict(gen_kwargs or {})
    hooks = _Hooks(target_model, bool(kw.get("do_sample")), request_id)
    original = target_model._get_candidate_generator

    def get_candidate_generator(*args, **kwargs):
        cg = original(*args, **kwargs)
        hooks.wrap(cg)
        return cg

    target_model._get_candidate_generator = get_candidate_generator  # this instance, this call only
    try:
        t0 = time.perf_counter()
        with torch.inference_mode():
            y = target_model.generate(input_ids, assistant_model=assistant_model, **kw)
        sync(target_model)
        wall = (time.perf_counter() - t0) * 1e3
    finally:
        del target_model._get_candidate_generator
    seq = y.sequences if hasattr(y, "sequences") else y
    out = seq[0, input_ids.shape[-1]:].tolist()
    steps = hooks.steps
    if steps:
        eos = kw.get("eos_token_id")
        eos = set(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
        last = steps[-1]
        # another stopping criterion (max_length, a stop string) leaves it null: the format names only these two
        done = "eos" if eos & set(last.emitted_tokens) else "max_new_tokens" if len(out) >= kw.get(
            "max_new_tokens", 1 << 30) else None
        steps[-1] = replace(last, finished=done)
    if writer is not None:
        writer.request(request_id, input_ids[0].tolist(), prompt_text, category, question_id)
        for s in steps:
            writer.step(s)
        writer.request_end(request_id, out, steps[-1].finished if steps else None, wall,
                           decode_text(out) if decode_text else "")
    return Recorded(seq, out, steps, wall)


def _info(model) -> dict[str, Any]:
    cfg = model.config
    return {"name": getattr(cfg, "_name_or_path", "") or type(model).__name__, "vocab_size": cfg.vocab_size,
            "dtype": str(model.dtype).replace("torch.", ""), "device": str(model.device), "reduced_vocab": None}


def hf_policy(assistant_model, spec: str | None = None) -> dict[str, Any]:
    """HF's window knobs as read from the assistant's generation_config: the header's `policy`."""
    gc = assistant_model.generation_config
    params = {"num_assistant_tokens": gc.num_assistant_tokens,
              "num_assistant_tokens_schedule": gc.num_assistant_tokens_schedule,
              "assistant_confidence_threshold": gc.assistant_confidence_threshold}
    return {"name": "hf-assisted", "params": params,
            "spec": spec or f"hf:{gc.num_assistant_tokens_schedule}:{gc.num_assistant_tokens}"}


def hf_header(target_model, assistant_model, gen_kwargs: dict[str, Any], prompts: list[dict] | None = None,
              spec: str | None = None, **extra: Any) -> dict[str, Any]:
    """A trace header for recorded HF runs (call before the first `record_assisted`: HF's heuristic
    schedule rewrites num_assistant_tokens on the assistant after each call)."""
    from engine.models.load import software_versions

    kw = gen_kwargs or {}
    sample = bool(kw.get("do_sample"))
    return {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "target": _info(target_model), "draft": _info(assistant_model),
            "policy": hf_policy(assistant_model, spec), "verifier": "hf-assisted",
            # generate's defaults where a knob is unset (None): temperature 1, no top-k, top-p 1
            "sampling": {"temperature": float(kw.get("temperature") or 1.0) if sample else 0.0,
                         "top_k": kw.get("top_k") or 0, "top_p": float(kw.get("top_p") or 1.0), "seed": kw.get("seed")},
            "max_new_tokens": kw.get("max_new_tokens"), "prompts": prompts or [],
            "software": software_versions(), "recorder": "engine.bench.hf_record", **extra}
