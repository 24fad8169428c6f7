"""Spec-Bench's speed metric (`evaluation/speed.py`), definition for definition.

For the questions of a task (category filter; 'mt_bench' = its eight labels, 'overall' = all):

    r_i        = Σ_turns new_tokens_i / Σ_turns wall_time_i            per-question throughput
    tok/s      = mean_i r_i                                             (mean of ratios, not Σ/Σ)
    baseline:    new_tokens recounted from the answer text,
                 Σ_turns (len(tokenizer(turn).input_ids) − 1)           (− 1: the BOS the tokenizer adds)
    speedup    = mean_i r_i(method) / mean_i r_i(baseline)              a ratio of means
    #Mean accepted tokens = mean over every step of accept_length      (accepted + 1; 1.00 for vanilla)
                 = our mean_emitted_per_call_incl_bonus (engine.metrics: it includes the bonus token)

Method and baseline are averaged separately over their own questions (speed.py does not pair
them). Why recount: methods report their own new_tokens, the vanilla baseline's text is what every
method must reproduce, so counting it with one tokenizer keeps the baseline independent of how a
method counts. Without a tokenizer `count_tokens=None` uses the file's new_tokens, which is NOT
speed.py's baseline (the CLI says so when it does that).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from engine.metrics import EMITTED_PER_CALL

MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag", "overall")


def select(answers: Sequence[dict], task: str = "overall") -> list[dict]:
    """speed.py's filter: 'overall' keeps all, 'mt_bench' its eight labels, else category == task."""
    if task == "overall":
        return list(answers)
    if task == "mt_bench":
        return [a for a in answers if a["category"] in MT_BENCH]
    return [a for a in answers if a["category"] == task]


def per_question(answers: Sequence[dict], count_tokens: Callable[[str], int] | None = None) -> list[float]:
    """r_i for each answer (parsed by engine.interop.specbench.parse_answers or trace_answers' form).

    `count_tokens` recounts the text (speed.py's baseline: len(tokenizer(turn).input_ids) − 1)."""
    out = []
    for a in answers:
        c = a if "turns" in a and "wall_time" in a else a["choices"][0]
        tokens = sum(count_tokens(t) for t in c["turns"]) if count_tokens else sum(c["new_tokens"])
        out.append(tokens / sum(c["wall_time"]))
    return out


def _mean(x: Sequence[float]) -> float:
    return sum(x) / len(x) if x else float("nan")


def speed(method: Sequence[dict], baseline: Sequence[dict], count_tokens: Callable[[str], int] | None = None,
          task: str = "overall") -> dict[str, Any]:
    """speed.py's `speed()` for one task: tokens/s of method and baseline, speedup, and its mean accepted
    tokens under our name, EMITTED_PER_CALL."""
    m, b = select(method, task), select(baseline, task)
    rm, rb = per_question(m), per_question(b, count_tokens)
    acc = [x for a in m for x in (a if "accept_lengths" in a else a["choices"][0])["accept_lengths"]]
    tps, tps_b = _mean(rm), _mean(rb)
    return {"task": task, "questions": len(m), "baseline_questions": len(b), "tokens_per_s": tps,
            "tokens_per_s_baseline": tps_b, "speedup": tps / tps_b if rb and tps_b > 0 else float("nan"),
            EMITTED_PER_CALL: _mean(acc),  # speed.py's "#Mean accepted tokens" (τ), bonus included
            "baseline_tokens": "recounted from text" if count_tokens else "new_tokens from the file (not speed.py)"}


def speed_table(method: Sequence[dict], baseline: Sequence[dict],
                count_tokens: Callable[[str], int] | None = None) -> list[dict[str, Any]]:
    """`get_single_speedup`: every Spec-Bench task that has questions in the method file, then overall."""
    return [speed(method, baseline, count_tokens, t) for t in TASKS if select(method, t)]


def hf_token_counter(tokenizer_dir: str) -> Callable[[str], int]:
    """speed.py's recount with a local tokenizer (never the hub): len(tokenizer(text).input_ids) − 1."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    return lambda text: len(tok(text).input_ids) - 1


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| task | questions | tok/s | baseline tok/s | speedup | mean accepted tokens τ = emitted per call (incl. bonus) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['questions']} | {r['tokens_per_s']:.2f} | {r['tokens_per_s_baseline']:.2f} | "
                     f"{r['speedup']:.3f}× | {r[EMITTED_PER_CALL]:.2f} |")
    if rows:
        lines.append(f"\nbaseline tokens: {rows[0]['baseline_tokens']}")
    return "\n".join(lines)
