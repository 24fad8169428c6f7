"""Live page: the side-by-side decode that records traces, and the folder they are written to.

Each side drafts with the pair's draft model, with a model-free drafter (lookup, suffix:
engine.drafters.modelfree), a saved block drafter (block:PATH, engine.drafters.block) or an EAGLE-style
head (eagle:PATH), the latter three built fresh for every run by engine.drafters.make_drafter.

Both sides are driven by `engine.decode.decode`, the loop every other tool uses, and each step is
written through `engine.trace.format.TraceWriter` as it happens: a finished run is a valid trace file, and
a stopped one is a valid interrupted trace (no footer), exactly what the CLI leaves when killed. The
models are held through app.live_queue for the whole run.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import weakref
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import streamlit as st

from app.live_inputs import AUTOREGRESSIVE, is_context, own_drafter, token_text
from app.live_models import BASE, SIDES, DemoPair
from app.live_queue import ModelQueue, model_queue

LOCK_WAIT_S = 900  # how long a session waits in line for the models before giving up


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def run_pair(pair: DemoPair, ids: list[int], text: str, specs: dict[str, str], policies: dict, cfg,
             out_dir: Path, on_step: Callable[[str, list[dict], bool], None], queue: ModelQueue | None = None,
             ticket: int | None = None, on_wait: Callable[[int], None] | None = None,
             baseline: bool = True, drafts: dict[str, str] | None = None) -> dict[str, Path]:
    """Decode the prompt with both policies (and, with `baseline`, autoregressively: the reference for
    the speedups), one verify call per side in turn, while holding the models (`queue`, in ticket
    order; a ticket is taken here when none is given). `drafts` gives a side a model-free drafter spec
    instead of the pair's draft model ('model', the default). Each step is written to that side's trace
    and reported via on_step(side, steps, done). The headers record when the run queued and started.
    Raises TimeoutError when the models stay busy for longer than LOCK_WAIT_S; always leaves the line."""
    from engine.drafters import make_drafter
    from engine.drafters.autoregressive import AutoregressiveDrafter, DraftContext
    from engine.run import Request, RequestRun, make_header, policy_for
    from engine.trace.format import TraceWriter

    queue = queue if queue is not None else model_queue()
    ticket = ticket if ticket is not None else queue.take()
    queued = _now()
    try:
        if not queue.wait(ticket, LOCK_WAIT_S, on_wait):
            raise TimeoutError(f"another session has been using the models for over {LOCK_WAIT_S} s")
        started = _now()
        sides = [*SIDES, BASE] if baseline else list(SIDES)
        pols = {**policies, BASE: None}
        drafts = drafts or {}
        paths = paths_for(out_dir, {**run_labels(specs, drafts), BASE: AUTOREGRESSIVE})
        cache: dict[int, str] = {}

        def text_of(out: list[int]) -> str:
            token_text(pair, cache, out)
            return "".join(cache[i] for i in out)

        with contextlib.ExitStack() as stack:
            runs, gens = {}, {}
            req = Request(ids, text, "live", None)
            for s in sides:
                target, draft = pair.sides[s]
                if pols[s] is None:
                    draft_lm = None
                elif own_drafter(drafts.get(s)):  # fresh per run: suffix:corpus=1 remembers what it saw
                    draft_lm = make_drafter(drafts[s], target)[1]  # a block drafter verifies with its own view
                else:
                    draft.want_hidden = pols[s].needs().hidden
                    draft_lm = (AutoregressiveDrafter(draft, DraftContext.parse(drafts[s])) if is_context(drafts.get(s))
                                else draft)
                header = make_header(target, draft_lm, pols[s], cfg, [req], command="streamlit app: Live page",
                                     live={"side": s, "queued_at": queued, "started_at": started},
                                     **({} if pair.real else {"demo": pair.label}))
                writer = stack.enter_context(TraceWriter(paths[s], header))
                # engine.run.RequestRun writes the request, each step and the request_end (wall clock of
                # this side's own steps: the other sides' turns are not in it)
                runs[s] = RequestRun(target, draft_lm, policy_for(pols[s], target, draft_lm, cfg, ids, pair.eos),
                                     cfg, req, 0, writer, pair.eos, text_of)
                gens[s] = iter(runs[s])
            live = list(sides)
            while live:  # one verify call per side in turn
                for s in list(live):
                    rec = next(gens[s], None)
                    if rec is not None and rec.finished:
                        next(gens[s], None)  # decode has returned: the run writes its request_end
                    if rec is None or rec.finished:
                        live.remove(s)
                    on_step(s, runs[s].steps, s not in live)
    finally:
        queue.release(ticket)
    return {s: paths[s] for s in sides}


def run_labels(specs: dict[str, str], drafts: dict[str, str] | None = None) -> dict[str, str]:
    """side -> what its trace file is named after: the policy spec, prefixed with its own drafter's
    (model-free, block, eagle, or the draft model's context window)."""
    drafts = drafts or {}
    return {s: f"{drafts[s].strip()}+{spec.strip()}" if (own_drafter(drafts.get(s)) or is_context(drafts.get(s))) and
            spec.strip() != AUTOREGRESSIVE else spec for s, spec in specs.items()}


def last_copy(steps: list[dict], prompt_ids: list[int]) -> tuple[int, list[int], dict] | None:
    """The latest step whose draft a model-free drafter copied from the context: (its index, the context
    it copied from — the prompt and the output before that step — and the drafter's trace fields, whose
    `span` / `match` index that context; see engine.drafters.modelfree). None when no step copied."""
    for k in range(len(steps) - 1, -1, -1):
        src = (steps[k].get("policy_fields") or {}).get("drafter")
        if isinstance(src, dict) and src.get("span"):
            return k, list(prompt_ids) + [t for d in steps[:k] for t in d["emitted_tokens"]], src
    return None


def copy_sources(steps: list[dict]) -> dict[str, int]:
    """How many steps copied from the prompt / the output / found no match (a model-free side only)."""
    out: dict[str, int] = {}
    for d in steps:
        src = (d.get("policy_fields") or {}).get("drafter")
        if isinstance(src, dict):
            key = src.get("source") or "none"
            out[key] = out.get(key, 0) + 1
    return out


def paths_for(out_dir: Path, specs: dict[str, str]) -> dict[str, Path]:
    safe = {s: "".join(ch if ch.isalnum() or ch in ".-" else "_" for ch in spec.strip()) for s, spec in specs.items()}
    return {s: out_dir / f"live-{s}-{safe[s]}.jsonl" for s in specs}


class RunDir:
    """A private temporary folder for one Live run's traces. It is removed by `remove()` (the next run
    of the session), when the object is collected (the session ended and Streamlit dropped its
    state), or when the server process exits — whichever comes first."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="speclab-live-"))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.path), True)

    def remove(self) -> None:
        self._finalizer()


def new_run_dir() -> Path:
    """A fresh folder for this session's next run; the previous run's folder is removed first."""
    old = st.session_state.get("live_dir")
    if isinstance(old, RunDir):
        old.remove()
    d = RunDir()
    st.session_state["live_dir"] = d
    return d.path
