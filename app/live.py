"""Live page machinery: the cached demo pair, its lock, and the side-by-side decode that records traces.

Why a lock: `st.cache_resource` hands the same model objects to every browser session, and the KV
caches live inside the LM wrappers. Two sessions decoding at once would interleave cache updates
and silently corrupt both outputs. So each cached pair carries one `threading.Lock`, and a run
holds it from first step to last. The two sides of one run get their own wrappers around the same
weights (each wrapper owns its cache), so side A and side B never share a cache either.

Both sides are driven by `engine.decode.decode`, the loop every other tool uses, and each step is
written through `engine.trace.TraceWriter` as it happens: a finished run is a valid trace file, and
a stopped one is a valid interrupted trace (no footer), exactly what the CLI leaves when killed.
This is the only app module that imports torch.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import streamlit as st

from app.data import REPO

DEMO_TARGET, DEMO_DRAFT = "smollm2-135m", "smollm2-draft"
MODELS_ENV = "SPECLAB_LIVE_MODELS"  # "tiny" forces the tiny random pair (tests; machines without weights)
DEV_QUESTIONS = REPO.parent / "shared" / "spec_bench" / "questions_dev.jsonl"
SPEC_BENCH_ENV = "SPECLAB_SPEC_BENCH"  # another Spec-Bench questions file (tests point it at a missing one)
MAX_PROMPT_CHARS = 6000  # a long Spec-Bench RAG question is ~4k characters
MAX_PROMPT_TOKENS = 1536  # keeps CPU prefill of both models to a few seconds
MAX_NEW_TOKENS = 512  # a live demo, not a benchmark: longer runs belong to `python -m engine decode`
LOCK_WAIT_S = 120  # how long a second session waits for the models before giving up
SIDES = ("A", "B")


@dataclass
class DemoPair:
    label: str  # what the page says it is running
    real: bool  # False: the tiny random fallback
    note: str  # why the fallback was used (empty for the real pair)
    target_name: str
    draft_name: str
    sides: dict[str, tuple[Any, Any]]  # side -> (target LM, draft LM): own caches, shared weights
    tokenizer: Any
    eos: tuple[int, ...]
    lock: threading.Lock


def _wrap(lm, name: str):
    from engine.models import HFModel

    return HFModel(lm.model, name=name, vocab_subset=lm.vocab_subset)


@st.cache_resource(show_spinner="Loading the demo models…")
def demo_pair(kind: str = "auto") -> DemoPair:
    """The SmolLM2 demo pair, or — when its weights are missing or kind == 'tiny' — the tiny random pair."""
    note = "forced by SPECLAB_LIVE_MODELS=tiny" if kind == "tiny" else ""
    if kind != "tiny":
        try:
            from engine.models import eos_token_ids, load_model

            t = load_model(DEMO_TARGET, role="target")
            d = load_model(DEMO_DRAFT, role="draft", target=t)
            sides = {s: (_wrap(t.lm, DEMO_TARGET), _wrap(d.lm, DEMO_DRAFT)) for s in SIDES}
            return DemoPair(f"{DEMO_TARGET} ← {DEMO_DRAFT}", True, "", DEMO_TARGET, DEMO_DRAFT, sides, t.tokenizer,
                            eos_token_ids(t), threading.Lock())
        except Exception as e:  # missing wheel, untrained draft, bad cache: fall back, and say why
            note = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    import torch

    from app.demo_models import TINY_DRAFT, TINY_LABEL, TINY_TARGET, tiny_pair

    # Tiny matrices: intra-op threads only add synchronisation (30× slower on a busy 2-core box).
    torch.set_num_threads(1)
    target, draft = tiny_pair()
    sides = {s: (_wrap(target, TINY_TARGET), _wrap(draft, TINY_DRAFT)) for s in SIDES}
    return DemoPair(TINY_LABEL, False, note, TINY_TARGET, TINY_DRAFT, sides, None, (), threading.Lock())


def get_pair() -> DemoPair:
    return demo_pair(os.environ.get(MODELS_ENV, "auto"))


def encode(pair: DemoPair, text: str) -> list[int]:
    if pair.tokenizer is None:
        from app.demo_models import text_to_ids

        return text_to_ids(text)
    from engine.prompts import encode as encode_chat

    return encode_chat(pair.tokenizer, text)


def token_text(pair: DemoPair, cache: dict[int, str], ids) -> dict[int, str]:
    for i in ids:
        if i not in cache:
            cache[i] = f"⟨{i}⟩" if pair.tokenizer is None else pair.tokenizer.decode([i])
    return cache


def questions_file() -> Path:
    return Path(os.environ.get(SPEC_BENCH_ENV) or DEV_QUESTIONS)


def dev_questions(limit_per_task: int = 3) -> list[Any]:
    """A few Spec-Bench dev questions per task, if the shared checkout is present; else none."""
    path = questions_file()
    if not path.is_file():
        return []
    from engine.prompts import load_prompts

    try:
        return load_prompts(path, per_category=limit_per_task)
    except ValueError:
        return []


def prompt_choices(limit_per_task: int = 3) -> tuple[list[Any], bool]:
    """(prompts to offer, whether they are Spec-Bench's): the dev questions when the file is there,
    else the project's own `engine.prompts.EXAMPLE_PROMPTS`, one per task type, so Live works on a
    fresh clone."""
    questions = dev_questions(limit_per_task)
    if questions:
        return questions, True
    from engine.prompts import EXAMPLE_PROMPTS

    return list(EXAMPLE_PROMPTS), False


def check_inputs(pair: DemoPair, text: str, specs: dict[str, str], max_new: int,
                 temperature: float = 0.0) -> tuple[list[int], dict, str | None]:
    """(prompt ids, side -> policy or None, error message) — every refusal is one readable line, given
    before decoding starts (a rule the decoder would refuse mid-run is refused here)."""
    from engine.policies import parse_policy

    if not text.strip():
        return [], {}, "The prompt is empty: pick a question or type one."
    if len(text) > MAX_PROMPT_CHARS:
        return [], {}, f"The prompt has {len(text)} characters; the live demo takes at most {MAX_PROMPT_CHARS}."
    if not 1 <= max_new <= MAX_NEW_TOKENS:
        return [], {}, f"Max new tokens must be between 1 and {MAX_NEW_TOKENS}, got {max_new}."
    policies = {}
    for side, spec in specs.items():
        spec = spec.strip()
        if spec == "autoregressive":
            policies[side] = None
            continue
        try:
            policies[side] = parse_policy(spec)
        except ValueError as e:
            return [], {}, f"Policy {side}: {e}"
        pol = policies[side]
        if temperature > 0 and not getattr(pol, "trim_exact_when_sampling", True):
            return [], {}, (f"Policy {side}: {pol.spec} drops drafts by value, which is exact for greedy decoding "
                            "only; set the temperature to 0 or use trim=0.")
        want = getattr(getattr(getattr(pol, "model", None), "cfg", None), "hidden_size", None)
        have = getattr(getattr(getattr(pair.sides[side][1], "model", None), "config", None), "hidden_size", None)
        if want is not None and have is not None and want != have:
            return [], {}, (f"Policy {side}: its pre-verifier reads {want}-dim draft states but this pair's draft "
                            f"has {have}; use the SmolLM2 pair.")
    ids = encode(pair, text)
    if len(ids) > MAX_PROMPT_TOKENS:
        return [], {}, f"The prompt is {len(ids)} tokens; the live demo takes at most {MAX_PROMPT_TOKENS}."
    return ids, policies, None


def run_pair(pair: DemoPair, ids: list[int], text: str, specs: dict[str, str], policies: dict, cfg,
             out_dir: Path, on_step: Callable[[str, list[dict], bool], None]) -> dict[str, Path]:
    """Decode the prompt with both policies, alternating one verify call per side, holding the pair's
    lock. Each step is written to that side's trace and reported via on_step(side, steps, done).
    Raises TimeoutError when another session holds the models for longer than LOCK_WAIT_S."""
    from engine.decode import decode
    from engine.run import Request, make_header
    from engine.trace import TraceWriter

    if not pair.lock.acquire(timeout=LOCK_WAIT_S):
        raise TimeoutError(f"another session has been using the demo models for over {LOCK_WAIT_S} s")
    paths = paths_for(out_dir, specs)
    try:
        with contextlib.ExitStack() as stack:
            gens, writers, steps, outs = {}, {}, {s: [] for s in SIDES}, {s: [] for s in SIDES}
            req = Request(ids, text, "live", None)
            for s in SIDES:
                target, draft = pair.sides[s]
                draft_lm = draft if policies[s] is not None else None
                if draft_lm is not None:
                    draft_lm.want_hidden = policies[s].needs_hidden
                header = make_header(target, draft_lm, policies[s], cfg, [req],
                                     command="streamlit app: Live page",
                                     **({} if pair.real else {"demo": pair.label}))
                writers[s] = stack.enter_context(TraceWriter(paths[s], header))
                writers[s].write({"type": "request", "request_id": 0, "prompt_ids": ids, "prompt_text": text,
                                  "category": "live", "question_id": None})
                gens[s] = decode(target, draft_lm, ids, policies[s], cfg, eos_ids=pair.eos)
            live = list(SIDES)
            while live:
                for s in list(live):
                    rec = next(gens[s], None)
                    if rec is not None:
                        steps[s].append(writers[s].step(rec))
                        outs[s].extend(rec.emitted_tokens)
                    if rec is None or rec.finished:
                        live.remove(s)
                        cache: dict[int, str] = {}
                        token_text(pair, cache, outs[s])
                        writers[s].write({"type": "request_end", "request_id": 0, "output_ids": outs[s],
                                          "output_text": "".join(cache[i] for i in outs[s]),
                                          "finished": rec.finished if rec else None, "new_tokens": len(outs[s]),
                                          "wall_ms": round(sum(d["t_draft_ms"] + d["t_verify_ms"] + d["t_prefill_ms"]
                                                               for d in steps[s]), 3)})
                    on_step(s, steps[s], s not in live)
    finally:
        pair.lock.release()
    return paths


def paths_for(out_dir: Path, specs: dict[str, str]) -> dict[str, Path]:
    safe = {s: "".join(ch if ch.isalnum() or ch in ".-" else "_" for ch in specs[s].strip()) for s in SIDES}
    return {s: out_dir / f"live-{s}-{safe[s]}.jsonl" for s in SIDES}


def session_dir() -> Path:
    """A private temporary folder per browser session for its live traces."""
    d = st.session_state.get("live_dir")
    if not d or not Path(d).is_dir():
        d = tempfile.mkdtemp(prefix="speclab-live-")
        st.session_state["live_dir"] = d
    return Path(d)
