"""Flags that several commands share, defined once so that they read and behave the same everywhere.

Each `add_*` adds one flag (or one group) with one spelling, one meaning and one help text; a command
passes only its own default. Spellings that recorded commands in docs/ still use are accepted as
hidden aliases (argparse.SUPPRESS: they parse, `--help` shows only the one name):

    --per-category  → --per-task        (prompts per Spec-Bench task)
    --temps         → --temperatures    (multibench's old spelling)

Lists are comma-separated: `--temperatures 0,0.7`, `--threads 1,2` where a command measures several.
"""

from __future__ import annotations

import argparse
import os
import sys

from engine.paths import SPEC_BENCH_DEV

BUNDLED_TARGET = "smollm2-135m"
BUNDLED_DRAFT = "smollm2-draft"
DTYPE_HELP = "fp32 | bf16 | fp16 | auto (bf16 where native: CUDA, avx512_bf16; else fp32)"


def add_target(p: argparse.ArgumentParser, default: str | None = BUNDLED_TARGET) -> None:
    p.add_argument("--target", default=default, required=default is None,
                   help="target model: bundled name (smollm2-135m), local dir, or cached hub id")


def add_draft(p: argparse.ArgumentParser, default: str | None = BUNDLED_DRAFT, required: bool = False,
              help: str | None = None) -> None:
    p.add_argument("--draft", default=default, required=required,
                   help=help or "draft model: bundled name (smollm2-draft), local dir, or cached hub id")


def add_device(p: argparse.ArgumentParser, dtype: str = "auto", device: str = "auto", threads: int | None = None,
               dtype_help: str = DTYPE_HELP, threads_flag: bool = True) -> None:
    """--dtype, --device, --threads (torch CPU threads; default torch's choice). `threads_flag=False`
    for a command whose --threads means something else (costs: a list of counts to measure)."""
    p.add_argument("--dtype", default=dtype, help=dtype_help)
    p.add_argument("--device", default=device, help="cpu | cuda | auto")
    if threads_flag:
        p.add_argument("--threads", type=thread_count, default=threads,
                       help="torch CPU threads, or 'auto': the cores no other process holds now (checked for 0.5 s)"
                            + (" (default: torch's choice)" if threads is None else ""))


def thread_count(text: str) -> int:
    """--threads N, or 'auto' → the cores no other process holds (engine.bench.cores.choose_threads), decided
    once when the command line is read, so every later use of the flag sees a number. Why: on a 2-core machine
    with one core held, a 2-thread pool runs at the pace of its stalled thread."""
    if text == "auto":
        import os

        from engine.bench.cores import choose_threads

        return choose_threads(os.cpu_count() or 1)
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--threads takes a whole number or 'auto', got {text!r}") from None


WEIGHTS_HELP = ("dense (de-quantised weights: the exactness reference) | quantized (each linear at its GGUF "
                "tensor's precision: int4 / int8 kernels, the CPU fast path) | int8 | int4 (engine.kernels.quant); "
                "target=PATH,draft=PATH gives each model its own (a mixed pair, engine.models.pair_weights)")


def add_weights(p: argparse.ArgumentParser, several: bool = False) -> None:
    """--weights: the weights path of both models, or of each (`target=dense,draft=quantized`)."""
    p.add_argument("--weights", default="dense",
                   help=WEIGHTS_HELP + (" — comma-separated to run every configuration on each path, interleaved "
                                        "(';' between paths when one is mixed: 'dense;target=dense,draft=quantized')"
                                        if several else ""))


def weights_list(text: str) -> list:
    """`dense,quantized` → [PairWeights('dense', 'dense'), PairWeights('quantized', 'quantized')]; a mixed
    pair `target=dense,draft=quantized` → one PairWeights; each checked (one line naming a bad one)."""
    from engine.models.pair_weights import parse_list

    return parse_list(text)


def add_per_task(p: argparse.ArgumentParser, default: int | None = None, dest: str = "per_task") -> None:
    """--per-task N (the old --per-category still parses)."""
    p.add_argument("--per-task", dest=dest, type=int, default=default,
                   help="first N prompts of each Spec-Bench task" + ("" if default is None else f" (default {default})"))
    p.add_argument("--per-category", dest=dest, type=int, help=argparse.SUPPRESS)  # old spelling


def add_prompts(p: argparse.ArgumentParser, per_task: int | None = None, limit: bool = True) -> None:
    """--prompts (default: the Spec-Bench dev questions), --per-task, and --limit."""
    p.add_argument("--prompts", default=str(SPEC_BENCH_DEV),
                   help="JSONL: Spec-Bench ('turns') or {'prompt': ...} lines (default: the Spec-Bench dev questions)")
    add_per_task(p, per_task)
    if limit:
        p.add_argument("--limit", type=int, default=None, help="first N prompts (of the per-task selection)")


def add_temperatures(p: argparse.ArgumentParser, default: str) -> None:
    """--temperatures T1,T2,… (the old --temps still parses)."""
    p.add_argument("--temperatures", default=default, help=f"comma-separated sampling temperatures (default {default})")
    p.add_argument("--temps", dest="temperatures", help=argparse.SUPPRESS)  # multibench's old spelling


def add_max_new_tokens(p: argparse.ArgumentParser, default: int) -> None:
    p.add_argument("--max-new-tokens", type=int, default=default, help=f"per prompt (default {default})")


def add_seed(p: argparse.ArgumentParser, default: int = 0) -> None:
    p.add_argument("--seed", type=int, default=default, help="sampling seed")


def add_out(p: argparse.ArgumentParser, help: str, required: bool = False, default: str | None = None) -> None:
    p.add_argument("--out", default=default, required=required, help=help)


def floats(text: str, flag: str) -> tuple[float, ...]:
    """'0,0.7' → (0.0, 0.7); one line naming the flag otherwise."""
    try:
        out = tuple(float(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated numbers, got {text!r}") from None
    if not out:
        raise ValueError(f"{flag} is empty")
    return out


def ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not out:
        raise ValueError(f"{flag} is empty")
    return out


def set_threads(n: int | None) -> None:
    """torch's CPU threads; more than the machine's cores is refused (it only adds spin-wait)."""
    if n:
        import os

        import torch

        cores = os.cpu_count() or 1
        if n > cores:
            raise ValueError(f"--threads {n} is more than this machine's {cores} cores")
        torch.set_num_threads(n)


# Environment switches that change which kernel runs (so a recorded command without them would not reproduce it).
KERNEL_SWITCHES = ("SPECLAB_QTILES", "SPECLAB_QGEMM", "SPECLAB_NO_QGEMM", "SPECLAB_BGEMV", "SPECLAB_DENSE_KERNEL",
                   "SPECLAB_GGUF_BLOCKS", "SPECLAB_QPANEL", "SPECLAB_QPANEL_TILES", "ONEDNN_MAX_CPU_ISA")


def command_line(prog: str = "python -m engine") -> str:
    """The command as typed, for result files and trace headers (arguments shell-quoted where they need it,
    so an empty value such as `--vllm ''` survives a copy and paste), after the kernel switches set in the
    environment (`SPECLAB_QTILES=1 python -m engine …`)."""
    import shlex

    env = [f"{k}={shlex.quote(os.environ[k])}" for k in KERNEL_SWITCHES if os.environ.get(k)]
    return " ".join([*env, prog, *(shlex.quote(a) for a in sys.argv[1:])])
