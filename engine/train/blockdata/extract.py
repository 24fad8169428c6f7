"""The feature extractor: sequences → target hidden states at the chosen layers, in shards.

    python -m engine dpace extract-qwen [--answers existing|greedy] [--goal-answer-tokens 1000000]

Per shard (`shard_size` examples of the deterministic stream of engine.train.blockdata.sources):
  1. answers: `existing` keeps the source's response (teacher forcing: prefill only), `greedy` lets
     the target write its own (batched greedy decoding, `gen_batch` sequences per forward);
  2. one prefill of prompt + answer (right-padded batches of ≤ `batch_tokens` tokens: the target is
     causal, so padding after a row never changes it) gives the outputs of `layers` and, from the LM
     head on answer positions only, the target's argmax next token `target_next`;
  3. the shard is written atomically (engine.train.blockdata.shards).
The held-out shard (greedy answers to `heldout` prompts never trained on) comes first: offline τ is
measured on the target's own answers whatever the training answers are. A complete shard is skipped,
so a killed run resumes at the first missing one; a directory made for other layers or another target
is refused before anything is written. The progress bar counts answer tokens towards the goal
(tokens/s and ETA); extraction stops early when the disk has less than `min_free_gb` free.

Layer choice: DFlash's rule for 5 features, uniform from layer 1 to L−3 (`build_target_layer_ids`):
for the 28-layer target (1, 7, 13, 19, 25). DFlash's ablation (Table 7) has 5 features ahead of 3 by
~3 % τ; the cost is storage (5 × 1536 × 2 B = 15 KB per token in bf16).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.train.blockdata.shards import (FeatureSpec, check_dataset, is_complete, read_manifest, shard_name,
                                           write_shard)
from engine.train.blockdata.sources import Example, encode, examples

QWEN = "qwen2.5-coder-1.5b"
QWEN_LAYERS = (1, 7, 13, 19, 25)


@dataclass(frozen=True)
class ExtractConfig:
    out_dir: str = ""  # empty = $SPECLAB_CACHE/drafter-data-qwen
    target: str = QWEN
    layers: tuple = QWEN_LAYERS  # DFlash's 5-feature rule for 28 layers (module doc)
    answers: str = "existing"  # existing (teacher-forced, prefill only) | greedy (the target's own answers)
    seed: int = 0  # fixes the example stream, hence the split and every shard's content
    code_share: float = 0.3  # stdlib code instructions in the stream; the rest ShareGPT (Spec-Bench is mostly chat)
    heldout: int = 24  # held-out prompts (greedy answers): ~3k answer positions for offline τ
    heldout_answer_tokens: int = 128  # the benches decode 128 tokens
    shard_size: int = 32  # examples per shard: ~12k tokens, ~2 min at 1 thread; a kill loses little
    max_shards: int = 0  # 0 = until the goal or the sources run out
    goal_answer_tokens: int = 1_000_000  # the progress bar's total (and where extraction stops)
    max_prompt_tokens: int = 256  # longer prompts are skipped: context costs prefill time and 15 KB/token
    max_answer_tokens: int = 384  # answers are cut here (no EOS then): several blocks of 16 per answer
    min_answer_tokens: int = 16  # fewer holds no full block
    batch_tokens: int = 768  # prefill rows per forward × length: 1 thread is at full speed from ~512 tokens
    gen_batch: int = 24  # greedy answers decoded together (measured 1 thread bf16: 27 tok/s at 16, 44 at 48)
    dtype: str = "bf16"  # the target's compute dtype; bf16 is native on avx512_bf16/AMX CPUs
    threads: int = 1  # the machine's cores are shared
    label_prompt: bool = True  # target_next on prompt positions too: an EAGLE-style head learns from every position (+~15 % prefill for the LM head)
    min_free_gb: float = 15.0  # stop before the disk fills


def default_dir() -> Path:
    from engine.models.smollm import cache_root

    return cache_root() / "drafter-data-qwen"


def eos_ids(tok) -> list[int]:
    ids = {tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
    return sorted(int(e) for e in ids if isinstance(e, int) and e >= 0 and e != tok.unk_token_id)


def spec_of(model, name: str, layers) -> FeatureSpec:
    c = model.config
    return FeatureSpec(target=name, hidden_size=int(c.hidden_size), num_layers=int(c.num_hidden_layers),
                       vocab_size=int(c.vocab_size), layers=tuple(int(x) for x in layers), dtype="bf16")


@torch.inference_mode()
def prefill_features(model, seqs: list[tuple[list[int], int]], layers, batch_tokens: int, pad_id: int,
                     label_prompt: bool = False):
    """Features [T, K·D] bf16 and target_next [T] int32 of sequences (ids, prompt_len), concatenated
    in the given order. target_next[t] = argmax of the target's logits at t, for t ≥ prompt_len − 1
    (every t with label_prompt; −1 where not computed)."""
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    head = model.get_output_embeddings()
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i][0]))
    feats: list[torch.Tensor | None] = [None] * len(seqs)
    nxt: list[torch.Tensor | None] = [None] * len(seqs)
    i = 0
    while i < len(order):
        j = i + 1
        while j < len(order) and (j - i + 1) * len(seqs[order[j]][0]) <= batch_tokens:
            j += 1
        rows = order[i:j]
        L = max(len(seqs[r][0]) for r in rows)
        x = torch.full((len(rows), L), pad_id, dtype=torch.long)
        for b, r in enumerate(rows):
            x[b, :len(seqs[r][0])] = torch.tensor(seqs[r][0])
        out = base(input_ids=x, output_hidden_states=True, use_cache=False)
        f = torch.cat([out.hidden_states[l + 1] for l in layers], -1).to(torch.bfloat16)
        for b, r in enumerate(rows):
            ids, plen = seqs[r]
            n = len(ids)
            feats[r] = f[b, :n].clone()
            t = torch.full((n,), -1, dtype=torch.int32)
            a = 0 if label_prompt else plen - 1
            h = out.last_hidden_state[b, a:n]
            t[a:] = head(h).argmax(-1).to(torch.int32)
            nxt[r] = t
        i = j
    return torch.cat(feats), torch.cat(nxt)


def greedy_answers(model, prompts: list[list[int]], max_new: int, eos: list[int], pad_id: int, batch: int):
    """The target's greedy answers (EOS kept when reached), `batch` prompts per forward."""
    from engine.train.draft.gen import greedy_batch

    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: dict[int, list[int]] = {}
    for s in range(0, len(order), batch):
        b = order[s:s + batch]
        for i, r in zip(b, greedy_batch(model, [prompts[i] for i in b], max_new, 1, set(eos), pad_id)):
            out[i] = r[0].tolist()
    return [out[i] for i in range(len(prompts))]


def build_shard(model, tok, exs: list[Example], cfg: ExtractConfig, greedy: bool, max_answer: int):
    """(tensors, manifest fields) of one shard of examples. A shard none of whose examples fits is
    written empty (zero sequences): a gap in the numbering would read as a missing shard."""
    eos = eos_ids(tok)
    pad = int(tok.pad_token_id if tok.pad_token_id is not None else eos[0])
    enc = [(e, encode(tok, e, cfg.max_prompt_tokens, max_answer, eos[0])) for e in exs]
    enc = [(e, pa) for e, pa in enc if pa is not None]
    c0, t0 = time.process_time(), time.perf_counter()
    if greedy:
        ans = greedy_answers(model, [p for _, (p, _) in enc], max_answer, eos, pad, cfg.gen_batch)
        enc = [(e, (p, a)) for (e, (p, _)), a in zip(enc, ans)]
    gen_s, gen_cpu = time.perf_counter() - t0, time.process_time() - c0
    enc = [(e, (p, a)) for e, (p, a) in enc if len(a) >= cfg.min_answer_tokens]
    seqs = [(p + a, len(p)) for _, (p, a) in enc]
    t1 = time.perf_counter()
    if seqs:
        feats, nxt = prefill_features(model, seqs, cfg.layers, cfg.batch_tokens, pad, cfg.label_prompt)
    else:
        feats = torch.zeros(0, len(cfg.layers) * int(model.config.hidden_size), dtype=torch.bfloat16)
        nxt = torch.zeros(0, dtype=torch.int32)
    pre_s, pre_cpu = time.perf_counter() - t1, time.process_time() - c0 - gen_cpu
    ids = torch.tensor([t for s, _ in seqs for t in s], dtype=torch.int32)
    off = torch.tensor([0] + [len(s) for s, _ in seqs], dtype=torch.int64).cumsum(0)
    plen = torch.tensor([p for _, p in seqs], dtype=torch.int32)
    T, A = int(ids.numel()), int(sum(len(s) - p for s, p in seqs))
    srcs: dict[str, int] = {}
    for e, _ in enc:
        srcs[e.source] = srcs.get(e.source, 0) + 1
    man = {"answer_tokens": A, "answers": "greedy" if greedy else "existing", "sources": srcs,
           "keys": [e.key for e, _ in enc], "generate_s": round(gen_s, 2), "prefill_s": round(pre_s, 2),
           "prefill_tok_s": round(T / max(pre_s, 1e-9), 1), "generate_cpu_s": round(gen_cpu, 2),
           "prefill_cpu_s": round(pre_cpu, 2),  # process CPU time: wall time overstates cost on a shared machine
           "answer_tok_per_cpu_s": round(A / max(gen_cpu + pre_cpu, 1e-9), 2)}
    return {"ids": ids, "offsets": off, "prompt_len": plen, "feats": feats, "target_next": nxt}, man


def load_qwen_target(name: str, dtype: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.models.load import resolve_dtype
    from engine.models.provision import model_dir

    d = model_dir(name)  # ModelNotInstalled: one line naming the model and `make models`
    model = AutoModelForCausalLM.from_pretrained(d, dtype=resolve_dtype(dtype), local_files_only=True).eval()
    return model, AutoTokenizer.from_pretrained(d, local_files_only=True)


def extract(cfg: ExtractConfig, model=None, tok=None, streams=None, progress: bool = True) -> dict:
    """Run (or resume) the extraction; returns a summary. model/tok/streams default to the Qwen target
    and the real sources (tests pass a tiny random model and toy examples)."""
    from tqdm import tqdm

    from engine.models.load import machine_description

    if cfg.answers not in ("existing", "greedy"):
        raise ValueError(f"answers must be existing or greedy, got {cfg.answers!r}")
    torch.set_num_threads(cfg.threads)
    root = Path(cfg.out_dir) if cfg.out_dir else default_dir()
    root.mkdir(parents=True, exist_ok=True)
    if model is None:
        from engine.models.provision import model_dir

        model_dir(cfg.target)  # fail fast (one line) before the sources are read
    held, train = examples(cfg.seed, cfg.heldout, cfg.code_share, streams)
    if model is None:
        model, tok = load_qwen_target(cfg.target, cfg.dtype)
    spec = spec_of(model, cfg.target, cfg.layers)
    check_dataset(root, spec, create=True, extra={"seed": cfg.seed, "code_share": cfg.code_share,
                                                  "heldout": cfg.heldout, "shard_size": cfg.shard_size})
    n_shards = (len(train) + cfg.shard_size - 1) // cfg.shard_size
    if cfg.max_shards:
        n_shards = min(n_shards, cfg.max_shards)
    jobs = [("heldout", 0, held, True, cfg.heldout_answer_tokens)]
    jobs += [("train", i, train[i * cfg.shard_size:(i + 1) * cfg.shard_size], cfg.answers == "greedy",
              cfg.max_answer_tokens) for i in range(n_shards)]
    done = 0
    for kind, i, *_ in jobs:
        p = root / shard_name(kind, i)
        if kind == "train" and is_complete(p):
            done += read_manifest(p, spec)["answer_tokens"]
    cpu = machine_description()
    bar = tqdm(total=cfg.goal_answer_tokens, initial=min(done, cfg.goal_answer_tokens), unit="tok",
               unit_scale=True, desc="answer tokens", disable=not progress, mininterval=10, dynamic_ncols=True)
    t0, new_tok, new_ans, written, stop = time.perf_counter(), 0, 0, 0, "sources exhausted"
    for kind, i, exs, greedy, max_answer in jobs:
        p = root / shard_name(kind, i)
        if is_complete(p):
            read_manifest(p, spec)  # a shard of another kind in place: one-line error, nothing overwritten
            continue
        if kind == "train" and done >= cfg.goal_answer_tokens:
            stop = "goal reached"
            break
        if shutil.disk_usage(root).free < cfg.min_free_gb * 2**30:
            stop = f"less than {cfg.min_free_gb:g} GB free on {root}"
            break
        arrays, man = build_shard(model, tok, exs, cfg, greedy, max_answer)
        man.update(spec.to_dict())
        man.update({"cpu": cpu, "threads": cfg.threads, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        write_shard(root, kind, i, arrays, man)
        written += 1
        new_tok += int(arrays["ids"].numel())
        if kind == "train":
            done += man["answer_tokens"]
            new_ans += man["answer_tokens"]
            bar.update(min(man["answer_tokens"], max(0, cfg.goal_answer_tokens - bar.n)))
        el = time.perf_counter() - t0
        bar.set_postfix_str(f"{new_tok / el:.0f} tok/s all, {new_ans / el:.0f} answer tok/s, shard {kind}-{i}")
    else:
        stop = "all shards done"
    bar.close()
    el = time.perf_counter() - t0
    return {"out_dir": str(root), "answer_tokens": done, "shards_written": written, "stop": stop,
            "tok_s": round(new_tok / el, 1) if written else None, "cpu": cpu}
