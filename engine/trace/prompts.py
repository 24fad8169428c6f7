"""Prompt files → token ids.

Two line formats are accepted (JSONL, one object per line):
    Spec-Bench: {"question_id": 81, "category": "writing", "turns": ["...", "..."]}
    plain:      {"prompt": "..."}            (optional "id", "category")
Only the first turn of a Spec-Bench question is used: the second turn would need the model's own
first answer in the context, which differs by policy only under sampling; keeping one turn makes
every policy decode exactly the same prompts.

A chat template is applied when the tokenizer has one (SmolLM2-Instruct does).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.trace.parse import parse_jsonl


@dataclass(frozen=True)
class Prompt:
    text: str
    category: str = ""
    question_id: int | str | None = None


def load_prompts(path: str | Path, limit: int | None = None, per_category: int | None = None,
                 categories: list[str] | None = None) -> list[Prompt]:
    p = Path(path)
    if not p.exists():
        raise ValueError(f"prompts file {str(p)!r} does not exist")
    if not p.is_file():
        raise ValueError(f"prompts file {str(p)!r} is not a file")
    for name, v in (("limit", limit), ("per_category", per_category)):
        if v is not None and (type(v) is not int or v < 1):  # limit=-3 used to select one prompt silently
            raise ValueError(f"prompts {name} must be a positive integer, got {v!r}")
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as e:  # permissions, a vanished mount: one line, not a traceback
        raise ValueError(f"prompts file {p.name}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"prompts file {p.name}: not UTF-8 text (byte {e.start})") from None
    out: list[Prompt] = []
    counts: dict[str, int] = {}
    for where, d in parse_jsonl(text.encode("utf-8"), p.name, [], strict=True):  # the one JSONL reader
        i = int(where.rsplit(" ", 1)[1])  # where = "NAME: line i" (the line number is the default question id)
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object")
        if "turns" in d:
            turns = d["turns"]
            if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
                raise ValueError(f"{p.name}: line {i}: field 'turns' must be a non-empty list of strings")
            text = turns[0]
        elif "prompt" in d:
            text = d["prompt"]
            if not isinstance(text, str):
                raise ValueError(f"{p.name}: line {i}: field 'prompt' must be a string")
        else:
            raise ValueError(f"{p.name}: line {i}: needs a 'turns' or 'prompt' field")
        if not text.strip():
            raise ValueError(f"{p.name}: line {i}: empty prompt")
        cat = str(d.get("category", ""))
        if categories and cat not in categories and task_of(cat) not in categories:
            continue
        key = task_of(cat)
        if per_category is not None and counts.get(key, 0) >= per_category:
            continue
        counts[key] = counts.get(key, 0) + 1
        out.append(Prompt(text, cat, d.get("question_id", d.get("id", i))))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise ValueError(f"{p.name}: no prompts selected")
    return out


# Project-written examples, one per Spec-Bench task type, for when the Spec-Bench file is absent
# (a fresh clone without ../shared/spec_bench): the app's Live page offers these instead.
EXAMPLE_PROMPTS: tuple[Prompt, ...] = (
    Prompt("Write a short, cheerful email inviting your neighbours to a street clean-up on Saturday afternoon. "
           "Say where to meet and what to bring.", "writing", "example-writing"),
    Prompt("You are a lighthouse keeper on a remote island in 1910. A visitor has just arrived by boat and asks "
           "what an ordinary day looks like for you. Answer in character.", "roleplay", "example-roleplay"),
    Prompt("Translate into French: \"The train to the coast leaves at half past eight, so please pack your bags "
           "tonight and leave the keys with the neighbour.\"", "translation", "example-translation"),
    Prompt("Summarize the following in two sentences. A small town library began lending tools such as drills, "
           "ladders and sewing machines alongside its books. Within a year its membership doubled, and residents "
           "said they saved money on home repairs. Volunteers now run monthly workshops on basic skills, and the "
           "town council is discussing whether to fund a second branch.", "summarization", "example-summarization"),
    Prompt("Answer the question using only the passage.\nPassage: The Vasa was a Swedish warship that sank on its "
           "maiden voyage in 1628, shortly after leaving the harbour. It was raised in 1961 and is now shown in a "
           "museum in Stockholm.\nQuestion: How many years passed between the sinking and the raising of the ship?",
           "rag", "example-rag"),
    Prompt("A bakery sells muffins in boxes of 6 and boxes of 4. Maya buys 3 boxes of 6 and some boxes of 4, "
           "30 muffins in all. How many boxes of 4 did she buy? Reason step by step.", "math_reasoning",
           "example-math"),
)

MT_BENCH = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}


def task_of(category: str) -> str:
    """Spec-Bench's six tasks: the eight MT-bench labels fold into 'mt_bench'."""
    return "mt_bench" if category in MT_BENCH else (category or "default")


def encode(tokenizer, text: str, chat: bool = True) -> list[int]:
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)
    return list(tokenizer(text)["input_ids"])
