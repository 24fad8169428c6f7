"""The trace loader's rules, one record at a time: the reference definition of a valid trace.

Every check the loader makes is written here once, as plain per-record Python (docs/trace-format.md
lists them). `engine.trace.screen` runs the per-step field checks as whole-column numpy operations
for speed, and only when it flags a step is the step handed to `validate_step` below for the exact
message — so the two must agree; tests/unit/trace/test_fuzz.py checks that they do on random mutations.

Why the loader recomputes instead of trusting: every number a page shows is derived from a trace. A
stated `emitted` of 1e308, a footer summary that disagrees with its steps, or a step with neither a
correction nor a bonus would otherwise flow into summaries and plots unchecked. So each derived field
(`window`, `emitted`, a request's `output_ids` / `new_tokens`, the context length chain, the footer
summary) is recomputed from the primary fields, and a file whose stated value disagrees is refused,
with one line naming the line and field.
"""

from __future__ import annotations

import math
from typing import Any

SCHEMA = "speclab.trace"
VERSION = 1
MAX_WINDOW = 1024  # larger windows are certainly corrupt: no verifier drafts that far
MAX_LINE = 8 << 20  # 8 MiB per record: a real step is a few kB
MAX_DEPTH = 64  # nesting of any JSON value; real records nest ≤ 6 (PACER's block list)
TOKEN_MAX = 10_000_000  # larger ids than any vocabulary we know of
MAX_NEW_TOKENS = 100_000  # the one ceiling of a request's new tokens: decode, RunSpec and reference files read it
MAX_CONTEXT = 1 << 24  # tokens in one sequence (prompt + output): 16.7M, far past any model's context
MAX_REQUEST_ID = 1 << 24
MAX_STEP = 1 << 24  # verify calls in one request (each emits ≥ 1 token, so ≤ MAX_CONTEXT)
MAX_MS = 3_600_000.0  # one hour: the ceiling on any step time (draft, verify, prefill, rule)
MAX_REQUEST_MS = 86_400_000.0  # one day: the ceiling on a request's wall time
MAX_ENTROPY = 32.0  # nats; ln(TOKEN_MAX) ≈ 16.1 is the most a distribution over our ids can have
MAX_TEXT = 1 << 22  # characters in a prompt/output text or any header string
FINISHED = (None, "eos", "max_new_tokens")
TIME_FIELDS = ("t_draft_ms", "t_verify_ms", "t_prefill_ms")
# Optional step fields and the value a step that omits them is loaded with (null = not set).
STEP_DEFAULTS = {"correction": None, "bonus": None, "finished": None, "policy_fields": dict, "all_drafts": None,
                 "chosen": 0, "decisions": None}
INT_FIELDS = {  # step field -> (lo, hi)
    "request_id": (0, MAX_REQUEST_ID), "step": (0, MAX_STEP), "context_len": (1, MAX_CONTEXT),
    "window_cap": (0, MAX_WINDOW), "accepted": (0, MAX_WINDOW),
}


class TraceError(ValueError):
    """A malformed trace; the message is one line: where and what."""


def fail(where: str, fld: str, msg: str):
    raise TraceError(f"{where}: field '{fld}': {msg}")


def is_int(v: Any) -> bool:
    return type(v) is int  # bool is an int subclass; JSON never yields other subclasses


def is_num(v: Any) -> bool:
    return type(v) is int or type(v) is float


def check_int(d: dict, k: str, where: str, lo: int = 0, hi: int = 1 << 62, optional: bool = False) -> None:
    v = d.get(k)
    if v is None and optional:
        return
    if not is_int(v):
        fail(where, k, f"expected an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        fail(where, k, f"{v} outside [{lo}, {hi}]")


def check_num_list(d: dict, k: str, where: str, n: int, lo: float, hi: float) -> None:
    v = d.get(k)
    if type(v) is not list:
        fail(where, k, f"expected a list, got {type(v).__name__}")
    if len(v) != n:
        fail(where, k, f"has {len(v)} entries, expected {n} (one per drafted token)")
    for i, x in enumerate(v):
        if not is_num(x):
            fail(where, f"{k}[{i}]", f"expected a number, got {type(x).__name__}")
        if not math.isfinite(x):
            fail(where, f"{k}[{i}]", f"non-finite value {x}")
        if not lo - 1e-6 <= x <= hi + 1e-6:
            fail(where, f"{k}[{i}]", f"{x} outside [{lo}, {hi}]")


def check_tokens(d: dict, k: str, where: str, max_len: int, min_len: int = 0) -> None:
    v = d.get(k)
    if type(v) is not list:
        fail(where, k, f"expected a list of token ids, got {type(v).__name__}")
    if len(v) > max_len:
        fail(where, k, f"{len(v)} tokens exceeds the limit {max_len}")
    if len(v) < min_len:
        fail(where, k, f"{len(v)} tokens, need at least {min_len}")
    if not v or set(map(type, v)) == {int} and min(v) >= 0 and max(v) < TOKEN_MAX:
        return  # the common case at C speed (prompts and outputs run to thousands of ids)
    for i, t in enumerate(v):
        if not is_int(t) or not 0 <= t < TOKEN_MAX:
            fail(where, f"{k}[{i}]", f"not a token id: {_short(t)}")


def check_time(d: dict, k: str, where: str, ceiling: float = MAX_MS) -> None:
    v = d.get(k)
    if not is_num(v) or not math.isfinite(v) or not 0 <= v <= ceiling:
        fail(where, k, f"expected a finite time in [0, {ceiling:g}] ms, got {_short(v)}")


def check_str(d: dict, k: str, where: str, optional: bool = True, max_len: int = MAX_TEXT) -> None:
    v = d.get(k)
    if v is None and optional:
        return
    if type(v) is not str:
        fail(where, k, f"expected a string, got {type(v).__name__}")
    if len(v) > max_len:
        fail(where, k, f"{len(v)} characters exceeds the limit {max_len}")


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


# ------------------------------------------------------------------ one step


# Fields an imported run (engine.interop, header `imported.lacks`) may leave null in its steps.
LACKABLE = ("context_len", "window_cap", "window", "draft_tokens", "q_draft", "p_target", "accept_probs",
            "draft_entropy", "emitted_tokens", "correction", "bonus")
_LACKABLE = frozenset(LACKABLE)


def validate_step(d: dict, where: str, lacks: frozenset = frozenset()) -> None:
    """Field checks of one step record (no context from other records). Fills `window` and
    `emitted` when absent; refuses them when stated and different from the lists they count.

    `lacks`: fields the header says this (imported) trace does not have; they may be null, and the
    checks that need them are skipped. Everything present is checked as usual. The checks run in this
    order (the first refusal is the one reported): counts, window, emitted tokens, per-token values,
    times, correction / bonus and finish, the multi-draft fields."""
    lackable = lacks & _LACKABLE if lacks else lacks

    def gone(k: str) -> bool:  # only LACKABLE fields: a header cannot excuse request_id, step or accepted
        return k in lackable and d.get(k) is None

    for k, (lo, hi) in INT_FIELDS.items():
        if not gone(k):
            check_int(d, k, where, lo, hi)
    w = _step_window(d, where, gone)
    a = d["accepted"]
    if w is not None and a > w:
        fail(where, "accepted", f"{a} accepted > window {w}")
    et, n_emitted = _step_emitted(d, where, gone, w, a)
    for k, hi in (("q_draft", 1.0), ("p_target", 1.0), ("accept_probs", 1.0), ("draft_entropy", MAX_ENTROPY)):
        if not gone(k) and w is not None:
            check_num_list(d, k, where, w, 0.0, hi)
        elif not gone(k):
            fail(where, k, "per-token values without draft_tokens or window")
    _step_times(d, where)
    _step_last_token(d, where, gone, w, a, et, n_emitted)
    check_str(d, "stop_reason", where, optional=False, max_len=64)
    if type(d.get("policy_fields", {})) is not dict:
        fail(where, "policy_fields", "expected an object")
    _step_drafts(d, where, w)
    d.setdefault("window", w)
    d.setdefault("emitted", n_emitted)
    for k, v in STEP_DEFAULTS.items():
        if k not in d:
            d[k] = v() if callable(v) else v


def _step_window(d: dict, where: str, gone) -> int | None:
    """The step's window: the drafted tokens' count, or the stated `window` (equal when both are there),
    within `window_cap`; None when an imported step lacks both."""
    w = None
    if not gone("draft_tokens"):
        check_tokens(d, "draft_tokens", where, MAX_WINDOW)
        w = len(d["draft_tokens"])
    if "window" in d and (d.get("window") is not None or not gone("window")):
        check_int(d, "window", where, hi=MAX_WINDOW)
        if w is not None and d["window"] != w:
            fail(where, "window", f"{d['window']} but {w} draft tokens")
        w = d["window"] if w is None else w
    elif w is None and not gone("window"):
        fail(where, "window", "no draft_tokens and no window")
    if w is not None and d.get("window_cap") is not None and w > d["window_cap"]:
        fail(where, "window", f"{w} drafted > window_cap {d['window_cap']}")
    return w


def _step_emitted(d: dict, where: str, gone, w: int | None, a: int) -> tuple[list | None, int]:
    """(emitted tokens or None where an imported step keeps only the count, their number): at most
    accepted + 1, the accepted prefix equal to the drafted tokens."""
    et = None
    if gone("emitted_tokens"):
        check_int(d, "emitted", where, lo=1, hi=MAX_WINDOW + 1)  # the count is all an imported step may keep
        n_emitted = d["emitted"]
    else:
        check_tokens(d, "emitted_tokens", where, MAX_WINDOW + 1, min_len=1)
        et = d["emitted_tokens"]
        n_emitted = len(et)
        if "emitted" in d:
            check_int(d, "emitted", where, hi=MAX_WINDOW + 1)
            if d["emitted"] != n_emitted:
                fail(where, "emitted", f"{d['emitted']} but {n_emitted} emitted tokens")
    if n_emitted > a + 1:
        fail(where, "emitted_tokens", f"{n_emitted} emitted > accepted + 1")
    m = min(a, n_emitted)
    if et is not None and w is not None and not gone("draft_tokens") and et[:m] != d["draft_tokens"][:m]:
        fail(where, "emitted_tokens", "the accepted prefix differs from the drafted tokens")
    return et, n_emitted


def _step_times(d: dict, where: str) -> None:
    """The step's times: each a finite non-negative ms; prefill on step 0 only; the rule within its verify."""
    for k in TIME_FIELDS:
        check_time(d, k, where)
    if d["step"] > 0 and d["t_prefill_ms"] != 0:
        fail(where, "t_prefill_ms", "prefill is timed on step 0 only")
    if d.get("t_rule_ms") is not None:  # optional (older traces lack it): the rule's share of the verify call
        check_time(d, "t_rule_ms", where)
        if d["t_rule_ms"] > d["t_verify_ms"] + 1e-3:
            fail(where, "t_rule_ms", f"{d['t_rule_ms']} ms in the rule > the whole verify call ({d['t_verify_ms']} ms)")


def _step_last_token(d: dict, where: str, gone, w: int | None, a: int, et: list | None, n_emitted: int) -> None:
    """Exactly one of correction / bonus (a bonus iff every drafted token was accepted), the last emitted token
    equal to it, and `finished` where fewer than accepted + 1 tokens were emitted."""
    for k in ("correction", "bonus"):
        check_int(d, k, where, hi=TOKEN_MAX - 1, optional=True)
    cor, bonus = d.get("correction"), d.get("bonus")
    if not (gone("correction") and gone("bonus")):
        if (cor is None) == (bonus is None):
            fail(where, "bonus", "exactly one of correction / bonus must be set")
        if w is not None and (bonus is not None) != (a == w):
            fail(where, "bonus", "a bonus token iff every drafted token was accepted, else a correction")
        if et is not None and n_emitted == a + 1 and et[-1] != (bonus if bonus is not None else cor):
            fail(where, "emitted_tokens", "the last emitted token is not the correction / bonus")
    fin = d.get("finished")
    if fin not in FINISHED or (fin is not None and type(fin) is not str):
        fail(where, "finished", f"expected null, 'eos' or 'max_new_tokens', got {_short(fin)}")
    if et is not None and n_emitted < a + 1 and fin is None:
        fail(where, "emitted_tokens", "fewer than accepted + 1 tokens on a step that did not finish the request")


def _step_drafts(d: dict, where: str, w: int | None) -> None:
    """The multi-draft fields: `all_drafts` with `chosen` pointing at `draft_tokens` (else chosen 0), and
    `decisions` one 0/1 per drafted token."""
    alt = d.get("all_drafts")
    if alt is not None:
        if type(alt) is not list or not alt or len(alt) > MAX_WINDOW:
            fail(where, "all_drafts", "expected a non-empty list of draft blocks")
        for k in range(len(alt)):
            check_tokens({"b": alt[k]}, "b", f"{where}: all_drafts[{k}]", MAX_WINDOW)
        check_int(d, "chosen", where, hi=len(alt) - 1)
        if alt[d["chosen"]] != d.get("draft_tokens"):
            fail(where, "chosen", "draft_tokens must equal all_drafts[chosen]")
    elif type(d.get("chosen", 0)) is not int or d.get("chosen", 0) != 0:
        fail(where, "chosen", "expected 0 on a single-draft step")
    dec = d.get("decisions")
    if dec is not None:
        if type(dec) is not list or len(dec) != w or any(type(x) is not int or x not in (0, 1) for x in dec):
            fail(where, "decisions", "expected one 0/1 decision per drafted token")


def lacks_of(header: dict, where: str) -> frozenset:
    """Fields an imported trace declares it does not have (`imported.lacks`)."""
    imp = header.get("imported")
    if imp is None:
        return frozenset()
    lacks = imp.get("lacks") if type(imp) is dict else None
    if type(lacks) is not list or len(lacks) > 64 or not all(type(k) is str for k in lacks):
        fail(where, "imported", "expected {'format': ..., 'lacks': [field names]}")
    return frozenset(lacks)


# ------------------------------------------------------------------ other records


def _obj(d: dict, k: str, where: str, optional: bool = False) -> dict:
    v = d.get(k)
    if v is None and optional:
        return {}
    if type(v) is not dict:
        fail(where, k, f"expected an object, got {type(v).__name__}")
    return v


def check_header(d: dict, where: str) -> None:
    """The header fields the pages and summaries read, with their types."""
    if d.get("schema") != SCHEMA:
        fail(where, "schema", f"expected {SCHEMA!r}, got {_short(d.get('schema'))}")
    if d.get("version") != VERSION or not is_int(d.get("version")):
        fail(where, "version", f"unsupported schema version {_short(d.get('version'))} (this build reads {VERSION})")
    for k in ("target", "policy", "sampling"):
        if k not in d:
            fail(where, k, "missing")
    target = _obj(d, "target", where)
    check_str(target, "name", f"{where}: target", optional=False, max_len=4096)
    draft = _obj(d, "draft", where, optional=True)
    check_str(draft, "name", f"{where}: draft", optional=not draft, max_len=4096)
    pol = _obj(d, "policy", where)
    for k in ("name", "spec"):
        check_str(pol, k, f"{where}: policy", max_len=4096)
    _obj(pol, "params", f"{where}: policy", optional=True)
    s = _obj(d, "sampling", where)
    t = s.get("temperature", 0.0)
    if not is_num(t) or not math.isfinite(t) or not 0 <= t <= 100:
        fail(where, "sampling.temperature", f"expected a number in [0, 100], got {_short(t)}")
    check_int(s, "top_k", f"{where}: sampling", hi=TOKEN_MAX, optional=True)
    check_int(s, "seed", f"{where}: sampling", lo=-(1 << 63), hi=(1 << 64) - 1, optional=True)
    p = s.get("top_p", 1.0)
    if not is_num(p) or not 0 < p <= 1:
        fail(where, "sampling.top_p", f"expected a number in (0, 1], got {_short(p)}")
    check_int(d, "max_new_tokens", where, lo=1, hi=MAX_CONTEXT, optional=True)
    for k in ("verifier", "created", "command", "prompts_file"):
        check_str(d, k, where)
    if d.get("demo") is not None and type(d["demo"]) not in (str, bool):
        fail(where, "demo", "expected a string or a boolean")
    prompts = d.get("prompts", [])
    if type(prompts) is not list:
        fail(where, "prompts", f"expected a list, got {type(prompts).__name__}")
    for i, pr in enumerate(prompts):
        if type(pr) is not dict:
            fail(where, f"prompts[{i}]", "expected an object")
        check_str(pr, "category", f"{where}: prompts[{i}]", max_len=256)


def check_request(d: dict, where: str, lacks: frozenset = frozenset()) -> None:
    check_int(d, "request_id", where, hi=MAX_REQUEST_ID)
    check_tokens(d, "prompt_ids", where, MAX_CONTEXT, min_len=0 if "prompt_ids" in lacks else 1)
    check_str(d, "prompt_text", where)
    check_str(d, "category", where, max_len=256)
    q = d.get("question_id")
    if q is not None and type(q) not in (int, str):
        fail(where, "question_id", f"expected an integer or a string, got {type(q).__name__}")


def check_request_end(d: dict, where: str) -> None:
    check_int(d, "request_id", where, hi=MAX_REQUEST_ID)
    check_tokens(d, "output_ids", where, MAX_CONTEXT)
    if "new_tokens" in d:
        check_int(d, "new_tokens", where, hi=MAX_CONTEXT)
        if d["new_tokens"] != len(d["output_ids"]):
            fail(where, "new_tokens", f"{d['new_tokens']} but {len(d['output_ids'])} output ids")
    check_str(d, "output_text", where)
    fin = d.get("finished")
    if fin not in FINISHED or (fin is not None and type(fin) is not str):
        fail(where, "finished", f"expected null, 'eos' or 'max_new_tokens', got {_short(fin)}")
    if d.get("wall_ms") is not None:
        check_time(d, "wall_ms", where, ceiling=MAX_REQUEST_MS)


def compare_summary(stated: dict, computed: dict, where: str) -> None:
    """A footer's summary must match the one recomputed from the steps. Keys this build does not
    compute are ignored (later writers may add some); floats agree to 1e-9 relative, because a
    recomputation may add the same numbers in another order."""
    for k, want in computed.items():
        if k not in stated:
            continue
        got = stated[k]
        if want is None or isinstance(want, dict):
            ok = got == want
        elif isinstance(want, int):
            ok = is_int(got) and got == want
        else:
            ok = is_num(got) and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
        if not ok:
            fail(where, f"summary.{k}", f"states {_short(got)}, the steps give {_short(want)}")


# ------------------------------------------------------------------ depth


_SCALARS = {int, float, str, bool, type(None)}


def depth(v: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0), counted without recursion so a hostile
    value cannot exhaust the stack; stops counting past `limit`."""
    best, stack = 0, [(v, 1)]
    while stack:
        x, lvl = stack.pop()
        if isinstance(x, dict):
            x = x.values()
        elif not isinstance(x, list):
            continue
        best = max(best, lvl)
        if best > limit:
            return best
        if set(map(type, x)) <= _SCALARS:  # a list of numbers (token ids): nothing below it
            continue
        stack.extend((y, lvl + 1) for y in x if isinstance(y, (dict, list)))
    return best


def check_depth(text: bytes | str, value: Any, where: str) -> None:
    """Refuse values nested deeper than MAX_DEPTH. Counting brackets in the raw text is a cheap upper
    bound, so the exact walk runs only on the rare records with many brackets."""
    n = text.count(b"[" if isinstance(text, bytes) else "[") + text.count(b"{" if isinstance(text, bytes) else "{")
    if n > MAX_DEPTH and depth(value) > MAX_DEPTH:
        raise TraceError(f"{where}: nested deeper than {MAX_DEPTH} levels")
