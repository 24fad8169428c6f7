"""Live page machinery: the cached model pairs, the first-come first-served queue for them, input
validation, and the side-by-side decode that records traces.

Why a queue: `st.cache_resource` hands the same model objects to every browser session, and the KV
caches live inside the LM wrappers. Two sessions decoding at once would interleave cache updates
and silently corrupt both outputs (and on a CPU they would only slow each other down). So one
`ModelQueue`, shared by every session and every pair, lets one run at a time hold the models, in the
order the Decode buttons were pressed (a ticket is taken in the button's callback, the earliest
point of the script run), and tells the waiting sessions where they are in line. The sides of one
run get their own wrappers around the same weights (each wrapper owns its cache), so side A, side B
and the autoregressive baseline never share a cache either.

Each side drafts with the pair's draft model, with a model-free drafter (lookup, suffix:
engine.drafters.modelfree) or with a saved block drafter (block:PATH, engine.drafters.block), the
latter two built fresh for every run by engine.drafters.make_drafter.

Both sides are driven by `engine.decode.decode`, the loop every other tool uses, and each step is
written through `engine.trace.format.TraceWriter` as it happens: a finished run is a valid trace file, and
a stopped one is a valid interrupted trace (no footer), exactly what the CLI leaves when killed.
This is the only app module that imports torch.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import streamlit as st

from app.data import REPO

DEMO_TARGET, DEMO_DRAFT = "smollm2-135m", "smollm2-draft"
QWEN_TARGET, QWEN_DRAFT = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
PAIRS = {"smollm2": (DEMO_TARGET, DEMO_DRAFT), "qwen2.5-coder": (QWEN_TARGET, QWEN_DRAFT),
         "qwen2.5-coder-quantized": (QWEN_TARGET, QWEN_DRAFT), "qwen2.5-coder-mixed": (QWEN_TARGET, QWEN_DRAFT)}
# the weights path (engine.kernels.quant) of each pair: the Qwen pair also runs on the quantized fast path, and as a
# mixed pair (engine.models.pair_weights): the dense target with the quantized draft, whose bytes fall ~3×
PAIR_WEIGHTS = {"qwen2.5-coder-quantized": "quantized", "qwen2.5-coder-mixed": "target=dense,draft=quantized"}
INSTALL_HINT = "run `make models`"
MODELS_ENV = "SPECLAB_LIVE_MODELS"  # "tiny" forces the tiny random pair (tests; machines without weights)
DEV_QUESTIONS = REPO.parent / "shared" / "spec_bench" / "questions_dev.jsonl"
SPEC_BENCH_ENV = "SPECLAB_SPEC_BENCH"  # another Spec-Bench questions file (tests point it at a missing one)
MAX_PROMPT_CHARS = 6000  # a long Spec-Bench RAG question is ~4k characters
MAX_PROMPT_TOKENS = 1536  # keeps CPU prefill of both models to a few seconds
MAX_NEW_TOKENS = 512  # a live demo, not a benchmark: longer runs belong to `python -m engine decode`
LOCK_WAIT_S = 900  # how long a session waits in line for the models before giving up
MAX_TEMPERATURE = 2.0
SIDES = ("A", "B")
BASE = "baseline"  # the autoregressive run on the same prompt that speedups are measured against


@dataclass
class DemoPair:
    label: str  # what the page says it is running
    real: bool  # False: the tiny random fallback
    note: str  # why the fallback was used (empty for the real pair)
    target_name: str
    draft_name: str
    sides: dict[str, tuple[Any, Any]]  # side -> (target LM, draft LM or None): own caches, shared weights
    tokenizer: Any
    eos: tuple[int, ...]


def _wrap(lm, name: str):
    from engine.core.lm import HFModel

    return HFModel(lm.model, name=name, vocab_subset=lm.vocab_subset)


def _sides(target, draft, tname: str, dname: str) -> dict[str, tuple[Any, Any]]:
    sides = {s: (_wrap(target, tname), _wrap(draft, dname)) for s in SIDES}
    sides[BASE] = (_wrap(target, tname), None)
    return sides


def qwen_installed() -> bool:
    """Both Qwen2.5-Coder models converted and stamped (`engine.models.provision`); False when unsure."""
    try:
        from engine.models.provision import installed
    except ImportError:
        return False
    return installed(QWEN_TARGET) and installed(QWEN_DRAFT)


def pair_options() -> tuple[list[str], str]:
    """(the pairs this machine can run, a hint for the ones it cannot). SmolLM2 is always offered (the
    tiny pair stands in when its weights are missing); Qwen2.5-Coder once `make models` installed it."""
    if qwen_installed():
        return list(PAIRS), ""
    return ["smollm2"], (f"The Qwen2.5-Coder pair ({QWEN_TARGET} ← {QWEN_DRAFT}) is not installed: {INSTALL_HINT} "
                         "(downloads ~1.6 GB once) to offer it here.")


# While a pair loads: (stage, fraction done) for the page's progress bar, and how long loading took
# last time on this machine (LOAD_TIMES_FILE), so the bar can say about how long is left.
LOAD_STAGE: dict[str, tuple[str, float]] = {}
# How long a load takes here (learned from this machine's past loads): app.live_explain.
from app.live_explain import LOAD_GUESS_S, LOAD_TIMES_FILE, load_estimate, record_load  # noqa: E402,F401


def _stage(which: str, text: str, frac: float) -> None:
    LOAD_STAGE[which] = (text, frac)


@st.cache_resource(show_spinner=False)  # the Live page draws its own progress bar (LOAD_STAGE)
def demo_pair(kind: str = "auto", which: str = "smollm2") -> DemoPair:
    """A cached pair. 'smollm2': the SmolLM2 demo pair, or — when its weights are missing or kind ==
    'tiny' — the tiny random pair. 'qwen2.5-coder': the installed Qwen pair (raises
    engine.models.provision.ModelNotInstalled, naming `make models`, when it is not)."""
    _stage(which, "importing torch and transformers", 0.05)
    if which.startswith("qwen2.5-coder"):
        from engine.models.load import eos_token_ids, load_model
        from engine.models.pair_weights import parse

        w = PAIR_WEIGHTS.get(which, "dense")
        pw = parse(w)  # each model's own path
        _stage(which, f"loading the target {QWEN_TARGET}" + (" and packing its weights" if pw.target != "dense" else ""),
               0.3)
        t = load_model(QWEN_TARGET, role="target", weights=pw.target)
        _stage(which, f"loading the draft {QWEN_DRAFT}" + (" and packing its weights" if pw.draft != "dense" else ""), 0.75)
        d = load_model(QWEN_DRAFT, role="draft", target=t, weights=pw.draft)
        label = f"{QWEN_TARGET} ← {QWEN_DRAFT}" + (f" ({w} weights)" if w != "dense" else "")
        return DemoPair(label, True, "", QWEN_TARGET, QWEN_DRAFT,
                        _sides(t.lm, d.lm, QWEN_TARGET, QWEN_DRAFT), t.tokenizer, eos_token_ids(t))
    note = "forced by SPECLAB_LIVE_MODELS=tiny" if kind == "tiny" else ""
    if kind != "tiny":
        try:
            from engine.models.load import eos_token_ids, load_model

            _stage(which, f"loading the target {DEMO_TARGET}", 0.3)
            t = load_model(DEMO_TARGET, role="target")
            _stage(which, f"loading the draft {DEMO_DRAFT}", 0.75)
            d = load_model(DEMO_DRAFT, role="draft", target=t)
            return DemoPair(f"{DEMO_TARGET} ← {DEMO_DRAFT}", True, "", DEMO_TARGET, DEMO_DRAFT,
                            _sides(t.lm, d.lm, DEMO_TARGET, DEMO_DRAFT), t.tokenizer, eos_token_ids(t))
        except Exception as e:  # missing wheel, untrained draft, bad cache: fall back, and say why
            note = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    import torch

    from app.demo_models import TINY_DRAFT, TINY_LABEL, TINY_TARGET, tiny_pair

    # Tiny matrices: intra-op threads only add synchronisation (30× slower on a busy 2-core box).
    torch.set_num_threads(1)
    target, draft = tiny_pair()
    return DemoPair(TINY_LABEL, False, note, TINY_TARGET, TINY_DRAFT, _sides(target, draft, TINY_TARGET, TINY_DRAFT),
                    None, ())


def get_pair(which: str = "smollm2") -> DemoPair:
    return demo_pair(os.environ.get(MODELS_ENV, "auto"), which)


LOADED: set[str] = set()  # pairs this server process has loaded (demo_pair's cache holds them)


def get_pair_with_progress(which: str, show: Callable[[float, str], None]) -> DemoPair:
    """get_pair, loading in a worker thread on first use while `show(fraction, text)` reports the stage,
    the seconds elapsed and about how many are left (from the last load on this machine). Errors of the
    load are raised here, in the page's thread."""
    import threading

    if which in LOADED:
        return get_pair(which)
    key = "tiny" if os.environ.get(MODELS_ENV) == "tiny" else which
    est, how = load_estimate(key)
    box: dict[str, Any] = {}
    t0 = time.monotonic()

    def work() -> None:
        try:
            box["pair"] = get_pair(which)
        except BaseException as e:  # noqa: BLE001  re-raised in the page's thread
            box["error"] = e

    th = threading.Thread(target=work, daemon=True)
    th.start()
    while th.is_alive():
        th.join(0.25)
        took = time.monotonic() - t0
        stage, frac = LOAD_STAGE.get(which, ("starting", 0.0))
        left = max(0.0, est - took)
        show(min(0.97, max(frac, took / est if est else 0.0)),
             f"Loading the models: {stage} · {took:.0f} s so far, "
             + (f"about {left:.0f} s left" if left else "almost done")
             + f" ({how})")
    if "error" in box:
        raise box["error"]
    took = time.monotonic() - t0
    if took > 1.0:  # a real load, not a cache hit
        record_load(key, took)
    LOADED.add(which)
    return box["pair"]


# ---------------------------------------------------------------- the queue


class ModelQueue:
    """First-come first-served access to the models, shared by every session.

    `take()` hands out a ticket (call it as early as possible: in the Decode button's callback);
    `wait(ticket, …)` blocks until every earlier ticket is released, reporting the position in line
    (1 = next) to `on_wait` about twice a second; `release(ticket)` gives the models up (or leaves
    the line). A ticket whose thread died without releasing it (a session that went away) is dropped,
    so a lost tab cannot block everyone behind it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._line: list[tuple[int, threading.Thread]] = []
        self._numbers = itertools.count(1)

    def take(self) -> int:
        with self._cond:
            n = next(self._numbers)
            self._line.append((n, threading.current_thread()))
            return n

    def _ahead(self, ticket: int) -> int:
        self._line = [(n, t) for n, t in self._line if t.is_alive() or n == ticket]
        return next((i for i, (n, _) in enumerate(self._line) if n == ticket), -1)

    def position(self, ticket: int) -> int:
        """How many tickets are ahead of this one (0: it holds the models or is next)."""
        with self._cond:
            return self._ahead(ticket)

    def wait(self, ticket: int, timeout: float, on_wait: Callable[[int], None] | None = None) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                ahead = self._ahead(ticket)
                if ahead < 0:
                    raise RuntimeError(f"ticket {ticket} is not in line")
                if ahead == 0:
                    return True
            if time.monotonic() >= deadline:
                return False
            if on_wait is not None:
                on_wait(ahead)  # outside the lock: a Streamlit call here may stop this script run
            with self._cond:
                if self._ahead(ticket) > 0:
                    self._cond.wait(max(0.01, min(0.5, deadline - time.monotonic())))

    def release(self, ticket: int) -> None:
        with self._cond:
            self._line = [(n, t) for n, t in self._line if n != ticket]
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._line)


@st.cache_resource
def model_queue() -> ModelQueue:
    """The one queue of this server process (all pairs: they share the CPU/GPU and its memory)."""
    return ModelQueue()


def encode(pair: DemoPair, text: str) -> list[int]:
    if pair.tokenizer is None:
        from app.demo_models import text_to_ids

        return text_to_ids(text)
    from engine.trace.prompts import encode as encode_chat

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
    from engine.trace.prompts import load_prompts

    try:
        return load_prompts(path, per_category=limit_per_task)
    except ValueError:
        return []


def prompt_choices(limit_per_task: int = 3) -> tuple[list[Any], bool]:
    """(prompts to offer, whether they are Spec-Bench's): the dev questions when the file is there,
    else the project's own `engine.trace.prompts.EXAMPLE_PROMPTS`, one per task type, so Live works on a
    fresh clone."""
    questions = dev_questions(limit_per_task)
    if questions:
        return questions, True
    from engine.trace.prompts import EXAMPLE_PROMPTS

    return list(EXAMPLE_PROMPTS), False


AUTOREGRESSIVE = "autoregressive"
PRESETS = {"fixed": "fixed:4", "heuristic": "heuristic", "confidence": "confidence:0.4",
           "cumulative": "cumulative:0.3", "entropy": "entropy:1.0", "pacer": "pacer", AUTOREGRESSIVE: AUTOREGRESSIVE}


def policy_names() -> list[str]:
    """Every policy the engine's parser accepts (engine.policies.base.POLICIES), plus
    'autoregressive' (no draft): what the Live page offers and what its error message lists."""
    from engine.policies.base import POLICIES  # lazy "module:Class" names: PACER is listed without importing it

    return sorted(POLICIES) + [AUTOREGRESSIVE]


def preset(name: str) -> str:
    """The spec a policy choice fills in (editable on the page)."""
    return PRESETS.get(name, name)


MODEL_DRAFT = "model"  # a side's draft choice meaning "the pair's draft model"
BLOCK_DRAFT = "block"  # a DFlash-style block drafter saved on disk (engine.drafters.block)
EAGLE_DRAFT = "eagle"  # an EAGLE-style head saved on disk (engine.drafters.eagle): the Qwen target's
DRAFT_PRESETS = {MODEL_DRAFT: MODEL_DRAFT, "lookup": "lookup:n=10,ngram=2", "suffix": "suffix:n=16",
                 BLOCK_DRAFT: "block:models/block-drafter-smollm2", EAGLE_DRAFT: "eagle:qwen2.5-coder-1.5b"}
DRAFT_SYNTAX = ("model, lookup[:n=N,ngram=G,pick=0|1], suffix[:n=N,depth=D,p=P,corpus=0|1], block:PATH "
                "(a saved block drafter for this pair's target) or eagle:PATH (a saved EAGLE-style head; "
                "eagle:qwen2.5-coder-1.5b is the committed one)")


def draft_names() -> list[str]:
    """What a side can draft with: the pair's draft model, every model-free drafter of the engine, and a
    saved block drafter."""
    from engine.drafters.modelfree import MODEL_FREE

    return [MODEL_DRAFT, *MODEL_FREE, BLOCK_DRAFT, EAGLE_DRAFT]


def draft_preset(name: str) -> str:
    """The spec a draft choice fills in (editable on the page): the drafter's main parameters spelt out."""
    return DRAFT_PRESETS.get(name, name)


def is_model_free(draft: str | None) -> bool:
    from engine.drafters.modelfree import is_model_free as engine_is_model_free

    return engine_is_model_free(draft)


def is_block(draft: str | None) -> bool:
    from engine.drafters import is_block as engine_is_block

    return engine_is_block(draft)


def is_eagle(draft: str | None) -> bool:
    from engine.drafters.factory import is_eagle as engine_is_eagle

    return engine_is_eagle(draft)


def own_drafter(draft: str | None) -> bool:
    """True when a side drafts with a drafter of its own (model-free, block or eagle), not the pair's draft model."""
    return is_model_free(draft) or is_block(draft) or is_eagle(draft)


def side_spec(pair: DemoPair, policy: str, drafter: str, temperature: float, max_new: int = 1):
    """The engine's RunSpec for one side: its drafter ('model' = the pair's draft model) and policy on
    this pair. Every rule of whether it can run is the spec's (engine.spec.RunSpec.check)."""
    from engine.spec import RunSpec

    draft = pair.draft_name if drafter == MODEL_DRAFT else drafter
    hidden = pair.sides[SIDES[0]][1].model.config.hidden_size if drafter == MODEL_DRAFT else None
    return RunSpec(draft=draft, policy=policy, temperature=temperature, max_new_tokens=max_new,
                   draft_hidden_size=hidden)


def side_errors(pair: DemoPair, spec: str, drafter: str, temperature: float) -> tuple[Any, str | None, str | None]:
    """(policy or None for autoregressive, why the drafter cannot draft, why the policy cannot run)
    on this pair, from the engine's RunSpec.check; only the page's own words ('model', 'autoregressive',
    the choices to offer) are checked here."""
    drafter, spec = drafter.strip(), spec.strip()
    target = pair.sides[BASE][0]
    derr = None
    if not drafter:
        derr = f"empty; choose {DRAFT_SYNTAX}"
    elif drafter != MODEL_DRAFT and not own_drafter(drafter):
        derr = f"unknown drafter {drafter.partition(':')[0].strip()!r}; choose {DRAFT_SYNTAX}"
    else:
        errors = side_spec(pair, "fixed:1", drafter, temperature).check(target)
        derr = errors[0] if errors else None
    if derr:
        drafter = MODEL_DRAFT  # judge the policy with the pair's draft model meanwhile
    if spec == AUTOREGRESSIVE:
        return None, derr, None
    name = spec.partition(":")[0].strip()
    names = policy_names()
    if not name:
        return None, derr, f"empty; choose one of {', '.join(names)}"
    if name not in names:
        return None, derr, f"unknown policy {name!r}; the engine accepts {', '.join(names)}"
    rs = side_spec(pair, spec, drafter, temperature)
    errors = rs.check(target)
    if errors:
        return None, derr, errors[0]
    return rs.parsed_policy(), derr, None


FIELDS = {"prompt": "Prompt", "A": "Policy A", "B": "Policy B", "draft_A": "Draft A", "draft_B": "Draft B",
          "max_new": "Max new tokens", "temperature": "Temperature"}


def validate(pair: DemoPair, text: str, specs: dict[str, str], max_new: float, temperature: float,
             drafts: dict[str, str] | None = None) -> tuple[list[int], dict, dict[str, str]]:
    """(prompt ids, side -> policy or None, field -> message). Every field is checked, each message
    starts with the field's label, and nothing may run while any message is left: a rule the decoder
    would refuse mid-run is refused here. `drafts`: side -> 'model' (the default) or a model-free spec."""
    errors: dict[str, str] = {}
    ids: list[int] = []
    if not text.strip():
        errors["prompt"] = "The prompt is empty: pick a question or type one."
    elif len(text) > MAX_PROMPT_CHARS:
        errors["prompt"] = f"The prompt has {len(text)} characters; the live demo takes at most {MAX_PROMPT_CHARS}."
    else:
        ids = encode(pair, text)
        if len(ids) > MAX_PROMPT_TOKENS:
            errors["prompt"] = f"The prompt is {len(ids)} tokens; the live demo takes at most {MAX_PROMPT_TOKENS}."
    if max_new is None or max_new != int(max_new) or not 1 <= max_new <= MAX_NEW_TOKENS:
        errors["max_new"] = f"Max new tokens must be a whole number from 1 to {MAX_NEW_TOKENS}; got {max_new:g}." \
            if max_new is not None else f"Max new tokens must be a whole number from 1 to {MAX_NEW_TOKENS}."
    t_ok = temperature is not None and 0 <= temperature <= MAX_TEMPERATURE
    if not t_ok:
        errors["temperature"] = (f"Temperature must be between 0 (greedy) and {MAX_TEMPERATURE:g}; "
                                 f"got {temperature:g}." if temperature is not None else
                                 f"Temperature must be between 0 (greedy) and {MAX_TEMPERATURE:g}.")
    policies = {}
    for side, spec in specs.items():
        pol, derr, err = side_errors(pair, spec, (drafts or {}).get(side, MODEL_DRAFT),
                                     float(temperature) if t_ok else 0.0)
        if derr:
            errors[f"draft_{side}"] = f"{FIELDS[f'draft_{side}']}: {derr}"
        if err:
            errors[side] = f"{FIELDS[side]}: {err}"
        policies[side] = pol
    return ids, policies, errors


def check_inputs(pair: DemoPair, text: str, specs: dict[str, str], max_new: int, temperature: float = 0.0,
                 drafts: dict[str, str] | None = None) -> tuple[list[int], dict, str | None]:
    """`validate` with the first message only: (prompt ids, side -> policy or None, error or None)."""
    ids, policies, errors = validate(pair, text, specs, max_new, temperature, drafts)
    if errors:
        return [], {}, next(iter(errors.values()))
    return ids, policies, None


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
                    draft_lm = draft
                    draft_lm.want_hidden = pols[s].needs().hidden
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
    (model-free or block)."""
    drafts = drafts or {}
    return {s: f"{drafts[s].strip()}+{spec.strip()}" if own_drafter(drafts.get(s)) and
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
