"""Live page: what a person may ask for, checked before anything runs — the prompt (a Spec-Bench dev
question or the project's examples; its length in characters and tokens), the policy and drafter of
each side (every rule is the engine's RunSpec.check; only the page's own words are checked here), max
new tokens and temperature. Each message starts with its field's label.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from app.live_models import BASE, SIDES, DemoPair
from app.traces import REPO

DEV_QUESTIONS = REPO.parent / "shared" / "spec_bench" / "questions_dev.jsonl"
SPEC_BENCH_ENV = "SPECLAB_SPEC_BENCH"  # another Spec-Bench questions file (tests point it at a missing one)
MAX_PROMPT_CHARS = 6000  # a long Spec-Bench RAG question is ~4k characters
MAX_PROMPT_TOKENS = 1536  # keeps CPU prefill of both models to a few seconds
MAX_NEW_TOKENS = 512  # a live demo, not a benchmark: longer runs belong to `python -m engine decode`
MAX_TEMPERATURE = 2.0


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
CONTEXT_DRAFT = "ctx"  # the pair's draft model reading only a long prompt's first and last tokens (DraftContext)
DRAFT_PRESETS = {MODEL_DRAFT: MODEL_DRAFT, CONTEXT_DRAFT: "ctx:192", "lookup": "lookup:n=10,ngram=2", "suffix": "suffix:n=16",
                 BLOCK_DRAFT: "block:models/block-drafter-smollm2", EAGLE_DRAFT: "eagle:qwen2.5-coder-1.5b"}
DRAFT_SYNTAX = ("model, ctx:W[,sink=S] (the draft model reading a prompt's first S = 64 and last W tokens), "
                "lookup[:n=N,ngram=G,pick=0|1], suffix[:n=N,depth=D,p=P,corpus=0|1], block:PATH "
                "(a saved block drafter for this pair's target) or eagle:PATH (a saved EAGLE-style head; "
                "eagle:qwen2.5-coder-1.5b is the committed one)")


def draft_names() -> list[str]:
    """What a side can draft with: the pair's draft model (whole prompt, or a context window of it), every
    model-free drafter of the engine, a saved block drafter and an EAGLE-style head."""
    from engine.drafters.modelfree import MODEL_FREE

    return [MODEL_DRAFT, CONTEXT_DRAFT, *MODEL_FREE, BLOCK_DRAFT, EAGLE_DRAFT]


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


def is_context(draft: str | None) -> bool:
    """'ctx:W[,sink=S]': the pair's draft model through a context window (engine.drafters.autoregressive)."""
    from engine.drafters.autoregressive import is_context as engine_is_context

    return engine_is_context(draft)


def own_drafter(draft: str | None) -> bool:
    """True when a side drafts with a drafter of its own (model-free, block or eagle), not the pair's draft model."""
    return is_model_free(draft) or is_block(draft) or is_eagle(draft)


def side_spec(pair: DemoPair, policy: str, drafter: str, temperature: float, max_new: int = 1):
    """The engine's RunSpec for one side: its drafter ('model' = the pair's draft model) and policy on
    this pair. Every rule of whether it can run is the spec's (engine.spec.RunSpec.check)."""
    from engine.spec import RunSpec

    model = drafter == MODEL_DRAFT or is_context(drafter)
    draft = pair.draft_name if model else drafter
    hidden = pair.sides[SIDES[0]][1].model.config.hidden_size if model else None
    return RunSpec(draft=draft, policy=policy, temperature=temperature, max_new_tokens=max_new,
                   draft_hidden_size=hidden, draft_context=drafter.strip() if is_context(drafter) else "")


def side_errors(pair: DemoPair, spec: str, drafter: str, temperature: float) -> tuple[Any, str | None, str | None]:
    """(policy or None for autoregressive, why the drafter cannot draft, why the policy cannot run)
    on this pair, from the engine's RunSpec.check; only the page's own words ('model', 'autoregressive',
    the choices to offer) are checked here."""
    drafter, spec = drafter.strip(), spec.strip()
    target = pair.sides[BASE][0]
    derr = None
    if not drafter:
        derr = f"empty; choose {DRAFT_SYNTAX}"
    elif drafter != MODEL_DRAFT and not own_drafter(drafter) and not is_context(drafter):
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
