"""Live page: the model pairs it decodes with — which pairs this machine offers, each pair loaded once
per server process (`st.cache_resource`) with a progress report while it loads, and the sides of one
run (A, B and the autoregressive baseline), each with its own wrappers around the same weights so no
two share a KV cache. Who may use the models when is app.live_queue; checking a side's inputs
app.live_inputs; the decode itself app.live_run. The live_* modules are the only app modules that
import torch, and only when a pair loads.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import streamlit as st

from app.live_explain import load_estimate, record_load

DEMO_TARGET, DEMO_DRAFT = "smollm2-135m", "smollm2-draft"
QWEN_TARGET, QWEN_DRAFT = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
PAIRS = {"smollm2": (DEMO_TARGET, DEMO_DRAFT), "qwen2.5-coder": (QWEN_TARGET, QWEN_DRAFT),
         "qwen2.5-coder-quantized": (QWEN_TARGET, QWEN_DRAFT), "qwen2.5-coder-mixed": (QWEN_TARGET, QWEN_DRAFT)}
# the weights path (engine.kernels.quant) of each pair: the Qwen pair also runs on the quantized fast path, and as a
# mixed pair (engine.models.pair_weights): the dense target with the quantized draft, whose bytes fall ~3×
PAIR_WEIGHTS = {"qwen2.5-coder-quantized": "quantized", "qwen2.5-coder-mixed": "target=dense,draft=quantized"}
INSTALL_HINT = "run `make models`"
MODELS_ENV = "SPECLAB_LIVE_MODELS"  # "tiny" forces the tiny random pair (tests; machines without weights)
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


# While a pair loads: (stage, fraction done) for the page's progress bar; how long loading took before on this
# machine (app.live_explain.load_estimate) lets the bar say about how long is left.
LOAD_STAGE: dict[str, tuple[str, float]] = {}


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
