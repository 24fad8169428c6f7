"""Shared fixtures and helpers: tiny models built from configs inside the tests (no downloads,
seconds to build), tiny model folders with a real tokenizer for the CLI tests, and the Streamlit
server + Chromium browser of the browser tests.

Fixtures used by more than one test module live here, never in a test module another one imports
(pytest would then see the fixture defined twice, and a module's skip would reach its importers)."""

import itertools
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from engine.core.lm import HFModel
from engine.models.tiny import noisy_copy, tiny_llama  # noqa: F401  (re-exported for the tests)

VOCAB = 64
REPO = Path(__file__).resolve().parent.parent
MAIN = str(REPO / "app" / "main.py")  # the app, for AppTest
TIMEOUT = 120  # seconds per AppTest script run: the Live page imports torch on a busy 2-core machine

# Test models are tiny: one thread avoids intra-op synchronisation that costs 30× on a loaded 2-core box.
torch.set_num_threads(1)


def greedy_reference(model, prompt, n):
    x = torch.tensor([prompt])
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="session")
def tiny_target():
    return tiny_llama(0)


@pytest.fixture(scope="session")
def tiny_draft(tiny_target):
    return noisy_copy(tiny_target, 1)


@pytest.fixture()
def pair(tiny_target, tiny_draft):
    return HFModel(tiny_target, "tiny-target"), HFModel(tiny_draft, "tiny-draft")


def decode_with_contexts(target, draft, prompt, policy, n, **kw):
    """A decode run's steps, the context each step started from, and the new tokens (drafter tests)."""
    from engine.decode import DecodeConfig, decode
    from engine.policies.base import parse_policy

    steps = list(decode(target, draft, prompt, parse_policy(policy), DecodeConfig(max_new_tokens=n, **kw)))
    seq, ctx = list(prompt), []
    for s in steps:
        ctx.append(list(seq))
        seq.extend(s.emitted_tokens)
    return steps, ctx, seq[len(prompt):]



# ------------------------------------------------------------------ χ² of the real decode loop on toy table models


def record_pacer_shards(target, draft, root: Path, window: int = 6, max_new_tokens: int = 24) -> list:
    """PACER training shards from four short requests (greedy and T = 0.7 alternating) through the real
    decode loop: two into train-00000, two into heldout-00000 under `root`. Returns the requests."""
    from engine.core.sampling import SamplingConfig
    from engine.decode import DecodeConfig
    from engine.train.pacer.data import record_request, save_shard, shard_tensors

    reqs = []
    for r, (prompt, temp) in enumerate([([3, 17, 5], 0.0), ([8, 2], 0.7), ([11, 4, 4], 0.0), ([9, 9], 0.7)]):
        dc = DecodeConfig(max_new_tokens=max_new_tokens, sampling=SamplingConfig(temperature=temp, seed=1))
        reqs.append((r, temp, record_request(target, draft, prompt, window, dc, request_id=r)))
    save_shard(shard_tensors(reqs[:2]), root / "train-00000.safetensors")
    save_shard(shard_tensors(reqs[2:]), root / "heldout-00000.safetensors")
    return reqs


def exact_joint(lm, prompt, n):
    """Every length-n continuation of `prompt` and its exact probability under `lm` (a TableLM)."""
    cells = list(itertools.product(range(lm.vocab_size), repeat=n))
    probs = []
    for z in cells:
        pr, ctx = 1.0, tuple(prompt)
        for t in z:
            pr *= float(lm.dist(ctx)[t])
            ctx += (t,)
        probs.append(pr)
    return cells, np.array(probs)


def chi_square_of_loop(verifier: str, draft, samples: int, policy="fixed:2", n: int = 3, prompt=(0,)):
    """Sample whole continuations with the real decode loop (T = 1) and compare with the exact joint."""
    from scipy.stats import chisquare

    from engine.core.lm import TableLM
    from engine.core.sampling import SamplingConfig
    from engine.decode import DecodeConfig, decode
    from engine.policies.base import parse_policy

    target = TableLM(3, seed=11)
    cells, expected = exact_joint(target, list(prompt), n)
    index = {c: i for i, c in enumerate(cells)}
    counts = np.zeros(len(cells))
    pol = parse_policy(policy) if isinstance(policy, str) else policy
    for s in range(samples):
        cfg = DecodeConfig(max_new_tokens=n, verifier=verifier, sampling=SamplingConfig(temperature=1.0, seed=s))
        out = [t for r in decode(target, draft, list(prompt), pol, cfg) for t in r.emitted_tokens]
        counts[index[tuple(out)]] += 1
    exp = expected * samples
    # Pool the rarest cells into one bin until it holds ≥ 5 expected counts (every other cell has ≥ 5).
    order = np.argsort(exp)
    n_pool, pooled = 0, 0.0
    while n_pool < len(exp) and (pooled < 5 or exp[order[n_pool]] < 5):
        pooled += exp[order[n_pool]]
        n_pool += 1
    rest = order[n_pool:]
    obs_b = np.append(counts[rest], counts[order[:n_pool]].sum())
    exp_b = np.append(exp[rest], pooled)
    assert exp_b.min() >= 5 and len(exp_b) >= 10
    return chisquare(obs_b, exp_b).pvalue, 0.5 * np.abs(counts / samples - expected).sum()

def pooled_chi_square(counts, probs, samples: int) -> float:
    """χ² p-value of observed `counts` against `probs` × samples, cells under 5 expected pooled into one."""
    from scipy.stats import chisquare

    big = probs * samples >= 5
    obs, exp = counts[big], probs[big] * samples
    if (~big).any():
        obs, exp = np.append(obs, counts[~big].sum()), np.append(exp, probs[~big].sum() * samples)
    return chisquare(obs, exp).pvalue


# ------------------------------------------------------------------ model folders for the CLI tests

WORDS = ["<unk>", "<eos>"] + [f"w{i}" for i in range(62)]


def save_with_tokenizer(model, path, vocab=WORDS):
    """`model` saved to `path` with a word-level tokenizer over `vocab` (built offline)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """(target dir, draft dir, prompts.jsonl): a tiny pair with a tokenizer, as `engine decode` reads it."""
    root = tmp_path_factory.mktemp("models")
    target = tiny_llama(0)
    t = save_with_tokenizer(target, root / "target")
    d = save_with_tokenizer(noisy_copy(target, 1), root / "draft")
    prompts = root / "prompts.jsonl"
    prompts.write_text("\n".join([
        json.dumps({"question_id": 81, "category": "writing", "turns": ["w1 w2 w3 w4", "w9"]}),
        json.dumps({"prompt": "w5 w6 w7", "category": "qa"}),
    ]) + "\n")
    return t, d, prompts


# ------------------------------------------------------------------ the browser tests' server and browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 90_000  # a 2-core box shared with training: page runs can take tens of seconds
VIEWPORT = {"width": 1280, "height": 1500}  # modest: readable screenshots that stay small


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (an environment fact only), or None."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} not found: install it with `apt-get install -y chromium`"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed: `pip install playwright` (no browser download needed)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_sweep(tmp_path_factory) -> Path:
    """A sweep folder with only summary.parquet (what the Sweeps page reads): 3 policies × 3 tasks."""
    import pandas as pd

    from engine.bench.sweep import SUMMARY_NAME, add_speedup

    folder = tmp_path_factory.mktemp("sweep")
    rows = [{"task_id": f"{pol}-{task}", "pair": "p", "target": "t", "dtype": "fp32", "policy": pol,
             "verifier": "token", "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0, "max_new_tokens": 8,
             "chat": True, "task": task, "shard_hash": task, "prompts": 1, "new_tokens": 8,
             "decode_ms": 8 / (tps * f) * 1e3, "target_calls": 4, "mean_accepted_per_call_excl_bonus": 0.5,
             "drafted_tokens": 4, "mean_emitted_per_call_incl_bonus": 2.0, "draft_acceptance_rate": 0.5, "tokens_per_s": tps * f}
            for pol, tps in (("autoregressive", 100.0), ("fixed:4", 150.0), ("heuristic", 90.0))
            for task, f in (("qa", 1.0), ("rag", 1.2), ("math", 0.8))]
    add_speedup(pd.DataFrame(rows)).to_parquet(folder / SUMMARY_NAME, index=False)
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = _free_port()
    env = {**os.environ, "SPECLAB_LIVE_MODELS": "tiny", "SPECLAB_SWEEP_DIR": str(tiny_sweep(tmp_path_factory))}
    cmd = [sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.headless", "true",
           "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", "--global.developmentMode", "false"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            out = proc.stdout.read().decode(errors="replace")[-2000:] if proc.stdout else ""
            pytest.fail(f"streamlit did not become healthy:\n{out}")
        time.sleep(0.5)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def new_session(browser, url: str, viewport: dict | None = None):
    """A separate browser context = a separate Streamlit session (own session_state, own Live folder)."""
    ctx = browser.new_context(viewport=viewport or VIEWPORT, accept_downloads=True)
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    pg.goto(url)
    return pg


def settle(pg) -> None:
    """Wait until the script run finished and no skeleton is left, then assert there is no exception box.
    (The short pause lets a rerun that a click just requested start before we wait for its end.)"""
    from playwright.sync_api import expect

    pg.wait_for_timeout(300)
    pg.wait_for_selector("[data-testid='stApp'][data-test-connection-state='CONNECTED']", state="attached")
    pg.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", state="attached")
    expect(pg.get_by_test_id("stSkeleton")).to_have_count(0)
    expect(pg.get_by_test_id("stException")).to_have_count(0)


def nav(pg, title: str) -> None:
    """Click the sidebar link, as a person would: the session (and its uploads) survives."""
    import re

    pg.get_by_test_id("stSidebarNav").get_by_role("link", name=title).click()
    pg.wait_for_url(re.compile(re.sub(r"[^a-z]", "", title.lower()) if title != "Overview" else ".*"))
    settle(pg)


# ------------------------------------------------------------------ one reference run of the tiny pair
# Shared by the analysis, cost-model, replay and reference tests (unit/offline, unit/trace) and the
# analyze CLI test: five prompts, one per task, 40 new tokens (module-scoped: built once per test file).
REF_PROMPTS = [[1, 5, 9, 3], [7], [2, 2, 2, 2, 11, 40], [3, 8, 1, 60, 22], [9, 9, 1]]
REF_CATS = ["writing", "summarization", "math_reasoning", "qa", "translation"]
REF_N_NEW = 40
from engine.offline.reference import ReferenceConfig, build_reference  # noqa: E402
from engine.trace.reference_file import Reference, accept_runs, load_reference  # noqa: E402


@pytest.fixture(scope="module")
def sharp_draft(tiny_target):
    """Noisy copy of the target (α ≈ 0.2–0.97 by prompt) with a sharpened head: same argmax,
    confidences spread over (0, 1) so confidence/entropy thresholds bite."""
    d = noisy_copy(tiny_target, 1, scale=0.3)
    with torch.no_grad():
        d.lm_head.weight.mul_(30.0)
    return d


@pytest.fixture(scope="module")
def models(tiny_target, sharp_draft):
    return HFModel(tiny_target, "tiny-target"), HFModel(sharp_draft, "tiny-draft")


@pytest.fixture(scope="module")
def ref_path(models, tmp_path_factory):
    target, draft = models
    path = tmp_path_factory.mktemp("ref") / "ref.jsonl"
    prompts = [{"prompt_ids": p, "category": c} for p, c in zip(REF_PROMPTS, REF_CATS)]
    cfg = ReferenceConfig(max_new_tokens=REF_N_NEW, timing_repeats=2)
    build_reference(target, draft, prompts, cfg, path, progress=False)
    return path


@pytest.fixture(scope="module")
def ref(ref_path):
    return load_reference(ref_path)


def synthetic(matches: list[list[int]], budget: int | None = None, tasks=None) -> Reference:
    """A greedy Reference from match patterns (for fixed/oracle replay; no tails needed)."""
    reqs = []
    for i, m in enumerate(matches):
        n = len(m)
        reqs.append({"request_id": i, "task": (tasks or ["t"] * len(matches))[i], "category": "",
                     "output_ids": [1] * n, "draft_argmax": [1 if x else 2 for x in m], "accept_run": accept_runs(m),
                     "q_top": [0.5] * n, "q_target": [0.5] * n, "entropy": [1.0] * n, "tails_by_pos": {}})
    header = {"mode": "greedy", "max_new_tokens": budget or max(len(m) for m in matches), "max_window": 16,
              "timings": None}
    return Reference(header, reqs, True, "synthetic")


# ------------------------------------------------------------------ PACER on the tiny pair
# The recorded shards (train/pacer data, the offline step replay, the pacer CLI) and an M_B stub with a
# driver for its block rule (the policy and the replay of its steps), defined once.
from engine.policies.base import DraftInfo  # noqa: E402
from engine.policies.pacer import PreVerifier, PreVerifierConfig  # noqa: E402

H = 32  # tiny_llama hidden size


@pytest.fixture(scope="module")
def recorded(tiny_target, tiny_draft, tmp_path_factory):
    """Shards + manifest recorded from the tiny pair through the real decode loop."""
    root = tmp_path_factory.mktemp("pacer-data")
    reqs = record_pacer_shards(HFModel(tiny_target, "t"), HFModel(tiny_draft, "d", want_hidden=True), root)
    (root / "manifest.json").write_text(json.dumps({"target": "t", "draft": "d", "config": {"window": 6},
                                                    "costs": {"t_verify_ms": [10.0 + k for k in range(7)]}}))
    return root, reqs


class FixedScores(PreVerifier):
    """M_B stub: token i gets scores[i-1]."""

    def __init__(self, scores):
        super().__init__(PreVerifierConfig(hidden_size=H, d_model=8, heads=2, ff=8, layers=1))
        self.scores = torch.tensor(scores)

    def score_step(self, hidden, q, ent):
        return self.scores[: hidden.shape[0]]


def run_blocks(policy, n):
    policy.reset()
    policy.propose()
    for i in range(1, n + 1):
        if not policy.keep_drafting(DraftInfo(i, 0, 0.9, 0.1, torch.zeros(H))):
            return i, policy.step_fields()
    return n, policy.step_fields()
