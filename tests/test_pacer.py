"""PACER: pre-verifier, stop rule, data recording, packed training, weights I/O (tiny models only)."""

import json

import pytest
import torch

from engine.decode import DecodeConfig, decode
from engine.core.lm import HFModel
from engine.policies.pacer import (Pacer, PreVerifier, PreVerifierConfig, block_decision, load_weights, save_weights,
                          step_mask)
from engine.policies.base import DraftInfo, parse_policy
from engine.core.sampling import SamplingConfig
from engine.train.pacer.fit import PacerTrainConfig, auc, calibration, train
from engine.offline.steps import StepData, load_split, make_batch, pack_steps
from engine.train.pacer.data import batch_loss
from tests.conftest import greedy_reference, record_pacer_shards

H = 32  # tiny_llama hidden size


def tiny_mb(seed=0, **kw) -> PreVerifier:
    torch.manual_seed(seed)
    return PreVerifier(PreVerifierConfig(hidden_size=H, d_model=16, heads=2, ff=32, **kw)).eval()


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


@pytest.mark.parametrize("block,t,rho", [(1, 0.5, 1.0), (2, 0.45, 1.1), (4, 0.5, 1.2)])
def test_greedy_pacer_reproduces_target(tiny_target, tiny_draft, block, t, rho):
    target, draft = HFModel(tiny_target, "t"), HFModel(tiny_draft, "d", want_hidden=True)
    prompt = [3, 17, 5, 9]
    pol = Pacer(block=block, threshold=t, rho=rho, max_window=8, model=tiny_mb())
    steps = list(decode(target, draft, prompt, pol, DecodeConfig(max_new_tokens=40)))
    out = [tok for s in steps for tok in s.emitted_tokens]
    assert out == greedy_reference(tiny_target, prompt, 40)
    for s in steps[:-1]:
        pf = s.policy_fields
        assert pf["stop"] in ("pre_verify", "cap") and pf["mb_ms"] >= 0
        if pf["stop"] == "pre_verify":
            assert s.stop_reason == "policy" and pf["blocks"][-1]["decision"] == "stop"
            assert s.window % block == 0
        for b in pf["blocks"]:
            assert len(b["scores"]) == block and b["tokens"][1] - b["tokens"][0] + 1 == block
    json.dumps([s.policy_fields for s in steps])  # trace-serialisable


@pytest.mark.parametrize("spec_block", [1, 2])
def test_trim_drops_the_failing_block_and_stays_exact(tiny_target, tiny_draft, spec_block):
    """trim=1: the block that failed pre-verification is never verified (a step may draft 0 tokens,
    i.e. be an autoregressive step), and greedy output still equals the target's own."""
    scores = [0.9, 0.9, 0.1, 0.1] * 8  # blocks of 2: pass, fail; b = 1: pass, pass, fail
    target, draft = HFModel(tiny_target, "t"), HFModel(tiny_draft, "d", want_hidden=True)
    prompt = [3, 17, 5, 9]
    pol = Pacer(block=spec_block, threshold=0.5, rho=1.0, max_window=8, model=FixedScores(scores), trim=1)
    steps = list(decode(target, draft, prompt, pol, DecodeConfig(max_new_tokens=30)))
    assert [t for s in steps for t in s.emitted_tokens] == greedy_reference(tiny_target, prompt, 30)
    for s in steps[:-1]:
        pf = s.policy_fields
        assert pf["stop"] == "pre_verify" and pf["dropped"] == spec_block
        assert s.window == 2 and len(pf["blocks"]) * spec_block == s.window + spec_block
    zero = Pacer(block=1, threshold=0.5, rho=1.0, max_window=8, model=FixedScores([0.1] * 32), trim=1)
    steps = list(decode(target, draft, prompt, zero, DecodeConfig(max_new_tokens=12)))
    assert all(s.window == 0 and s.emitted == 1 for s in steps)  # every draft dropped: plain AR steps
    assert [t for s in steps for t in s.emitted_tokens] == greedy_reference(tiny_target, prompt, 12)
    assert parse_policy("pacer:b=2,t=0.5,trim=1").spec.endswith("trim=1")
    with pytest.raises(ValueError, match="trim"):
        Pacer(trim=2, model=tiny_mb())


def test_stop_rule_threshold_growth_and_reason():
    assert block_decision(0.4, 0.5, 1.2) == (True, 0.5)
    assert block_decision(0.6, 0.5, 1.2) == (False, pytest.approx(0.6))
    pol = Pacer(block=4, threshold=0.5, rho=1.2, max_window=32, model=FixedScores([0.8] * 32))
    n, f = run_blocks(pol, 32)
    # t: 0.5 → 0.6 → 0.72 → 0.864; block 4's mean 0.8 < 0.864 stops after 16 tokens
    assert n == 16 and f["stop"] == "pre_verify"
    assert [b["t_before"] for b in f["blocks"]] == pytest.approx([0.5, 0.6, 0.72, 0.864])
    assert [b["decision"] for b in f["blocks"]] == ["continue"] * 3 + ["stop"]
    assert f["blocks"][0]["mean"] == pytest.approx(0.8) and f["blocks"][0]["tokens"] == [1, 4]


def test_stop_rule_no_growth_and_cap():
    pol = Pacer(block=4, threshold=0.5, rho=1.0, max_window=12, model=FixedScores([0.8] * 32))
    n, f = run_blocks(pol, 12)
    assert n == 12 and f["stop"] == "cap" and len(f["blocks"]) == 2  # no M_B call at the cap itself
    assert all(b["t_after"] == 0.5 for b in f["blocks"])
    # mean of a block is what counts: one bad token in a good block does not stop
    pol = Pacer(block=2, threshold=0.5, rho=1.0, max_window=8, model=FixedScores([0.9, 0.2, 0.3, 0.4, 0.9, 0.9]))
    n, f = run_blocks(pol, 8)
    assert n == 4 and [b["mean"] for b in f["blocks"]] == pytest.approx([0.55, 0.35])
    # state resets per step
    n2, _ = run_blocks(pol, 8)
    assert n2 == 4


def test_policy_validation_and_spec():
    with pytest.raises(ValueError, match="rho"):
        Pacer(rho=0.9, model=tiny_mb())
    with pytest.raises(ValueError, match="block"):
        Pacer(block=20, max_window=16, model=tiny_mb())
    pol = Pacer(block=2, threshold=0.4, rho=1.1, max_window=8, model=tiny_mb())
    assert pol.spec == "pacer:b=2,t=0.4,rho=1.1,max=8,trim=0"  # unset trim: the paper's rule for b > 1 …
    assert Pacer(block=1, model=tiny_mb()).trim == 1  # … and trimming where it is exact at every T (b = 1)
    assert parse_policy("pacer:b=2,trim=1").spec.endswith("trim=1")  # the spec always round-trips trim
    with pytest.raises(ValueError, match="want_hidden"):
        pol.propose()
        pol.keep_drafting(DraftInfo(1, 0, 0.5, 0.1, None))


def _fake_data(n_steps=12, seed=0) -> StepData:
    g = torch.Generator().manual_seed(seed)
    win = torch.randint(1, 9, (n_steps,), generator=g)
    acc = torch.minimum(torch.randint(0, 9, (n_steps,), generator=g), win)
    N = int(win.sum())
    return StepData(hidden=torch.randn(N, H, generator=g).half(), q=torch.rand(N, generator=g).clamp_min(0.01),
                    ent=torch.rand(N, generator=g) * 3, h=torch.rand(N, generator=g),
                    pos=torch.cat([torch.arange(1, int(w) + 1) for w in win]).int(),
                    step_off=torch.cat([torch.zeros(1, dtype=torch.long), win.cumsum(0)]),
                    accepted=acc.int(), window=win.int(), request=torch.zeros(n_steps, dtype=torch.int32),
                    temperature=torch.zeros(n_steps))


@pytest.mark.parametrize("scheme", ["prefix", "masked"])
def test_packed_equals_unpacked_loss(scheme):
    data = _fake_data()
    model = PreVerifier(PreVerifierConfig(hidden_size=H, d_model=16, heads=2, ff=32, dropout=0.0))
    packed = make_batch(data, pack_steps(data.window.tolist(), 40), 40, scheme)
    unpacked = make_batch(data, [[i] for i in range(data.n_steps)], 8, scheme)
    assert packed["hidden"].shape[0] < data.n_steps  # really packed
    lp, lu = batch_loss(model, packed), batch_loss(model, unpacked)
    assert abs(lp.item() - lu.item()) < 1e-6
    gp = torch.autograd.grad(lp, list(model.parameters()))
    gu = torch.autograd.grad(lu, list(model.parameters()))
    assert max(float((a - b).abs().max()) for a, b in zip(gp, gu)) < 1e-6


def test_step_mask_block_diagonal_causal():
    m = step_mask(torch.tensor([0, 0, 1, 1, 1, -1]))
    assert m[1, 0] and not m[0, 1] and not m[2, 1] and m[4, 2] and not m[2, 4]
    assert m[5, 5] and not m[5, 4]


def test_weights_round_trip(tmp_path):
    m = tiny_mb(3, use_pos=False)
    p = tmp_path / "w.safetensors"
    save_weights(m, p, {"note": "x"})
    m2, extra = load_weights(p)
    assert extra == {"note": "x"} and m2.cfg == m.cfg
    h, q, e = torch.randn(6, H), torch.rand(6), torch.rand(6)
    assert torch.equal(m.score_step(h, q, e), m2.score_step(h, q, e))
    assert Pacer(weights=str(p)).model.cfg.use_pos is False


def test_malformed_weights_one_line_error(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file at all")
    from safetensors.torch import save_file

    foreign = tmp_path / "foreign.safetensors"
    save_file({"x": torch.zeros(2)}, str(foreign))
    for path in (tmp_path / "missing.safetensors", bad, foreign):
        with pytest.raises(ValueError) as e:
            Pacer(weights=str(path))
        msg = str(e.value)
        assert "\n" not in msg and str(path) in msg and msg.startswith("cannot load PACER weights")


def test_auc_and_calibration():
    s = torch.tensor([0.1, 0.4, 0.35, 0.8, 0.4])
    y = torch.tensor([0, 0, 1, 1, 1])
    pairs = [(a, b) for a in range(5) for b in range(5) if y[a] == 1 and y[b] == 0]
    brute = sum(1.0 if s[a] > s[b] else 0.5 if s[a] == s[b] else 0.0 for a, b in pairs) / len(pairs)
    assert auc(s, y) == pytest.approx(brute)
    ece, table = calibration(torch.tensor([0.05, 0.05, 0.95, 0.95]), torch.tensor([0, 0, 1, 1]))
    assert ece == pytest.approx(0.05) and [r["n"] for r in table] == [2, 2]


@pytest.fixture(scope="module")
def recorded(tiny_target, tiny_draft, tmp_path_factory):
    """Shards + manifest recorded from the tiny pair through the real decode loop."""
    root = tmp_path_factory.mktemp("pacer-data")
    reqs = record_pacer_shards(HFModel(tiny_target, "t"), HFModel(tiny_draft, "d", want_hidden=True), root)
    (root / "manifest.json").write_text(json.dumps({"target": "t", "draft": "d", "config": {"window": 6},
                                                    "costs": {"t_verify_ms": [10.0 + k for k in range(7)]}}))
    return root, reqs


def test_recording_labels(recorded):
    root, reqs = recorded
    for _, _, d in reqs:
        assert len(d["hidden"]) == sum(d["window"]) and d["hidden"][0].shape == (H,)
        assert all(0 <= a <= w <= 6 for a, w in zip(d["accepted"], d["window"]))
    tr = load_split(root, "train")
    y, w = tr.labels()
    assert int(y.sum()) == int(tr.accepted.sum()) and bool((w == 1).all())
    ym, wm = tr.labels("masked")
    assert torch.equal(ym, y) and int(wm.sum()) == int(torch.minimum(tr.accepted + 1, tr.window).sum())


def test_train_then_decode_and_sweep(recorded, tiny_target, tiny_draft, tmp_path, capsys):
    from engine.__main__ import main

    root, _ = recorded
    w = tmp_path / "m.safetensors"
    out = train(PacerTrainConfig(data_dir=str(root), out=str(w), run_dir=str(tmp_path / "run"), steps=6,
                                 batch_rows=2, pack_len=24, eval_every=3, d_model=16), progress=False)
    assert 0 <= out["heldout"]["ece"] <= 1 and out["params"] > 0
    assert (tmp_path / "m.summary.json").exists() and (tmp_path / "run" / "ckpt.safetensors").exists()
    target, draft = HFModel(tiny_target, "t"), HFModel(tiny_draft, "d", want_hidden=True)
    pol = Pacer(block=2, weights=str(w), max_window=6)
    steps = list(decode(target, draft, [3, 17, 5], pol, DecodeConfig(max_new_tokens=20)))
    assert [t for s in steps for t in s.emitted_tokens] == greedy_reference(tiny_target, [3, 17, 5], 20)
    # CLI: resume-safe retrain with a card, then the offline sweep
    card = tmp_path / "card.md"
    assert main(["pacer", "train", "--data-dir", str(root), "--out", str(tmp_path / "c.safetensors"), "--run-dir",
                 str(tmp_path / "run2"), "--steps", "4", "--batch-rows", "2", "--pack-len", "24", "--eval-every",
                 "2", "--d-model", "16", "--use-pos", "false", "--card", str(card)]) == 0
    assert "AUC" in card.read_text() and "Retrain" in card.read_text()
    sweep_json = tmp_path / "sweep.json"
    assert main(["pacer", "sweep", "--data-dir", str(root), "--weights", str(w), "--variant",
                 f"nope={tmp_path / 'c.safetensors'}", "--what-if-c", "0.05", "--out", str(sweep_json)]) == 0
    res = json.loads(sweep_json.read_text())
    for split in res["splits"].values():
        for row in split["ceiling"] + split["what_if_flat"]:  # same windows as the oracle, plus the lost draft
            assert row["perfect_preverifier"] <= row["oracle"] + 1e-9
        assert [r["c"] for r in split["what_if_flat"]] == [0.05]
    assert "nope (best)" in res["splits"]["all"]["ablations"]
    assert "oracle (exact)" in res["splits"]["all"]["baselines"]
    ev = tmp_path / "eval.json"  # `pacer eval` = the training summary's held-out evaluation, from the CLI
    assert main(["pacer", "eval", "--data-dir", str(root), "--weights", str(w), "--out", str(ev)]) == 0
    got = next(iter(json.loads(ev.read_text())["weights"].values()))
    assert got["auc"] == pytest.approx(out["heldout"]["auc"]) and got["ece"] == pytest.approx(out["heldout"]["ece"])
    assert "sim. speedup vs AR" in capsys.readouterr().out


def test_replayed_pacer_decides_as_the_live_policy():
    """The replay runs the Pacer class itself, fed each step's recorded scores (use_scores) instead of
    running M_B: windows, M_B calls and drafted tokens equal the live policy's on the same scores."""
    from engine.offline import pacer_sweep as sim
    from engine.offline.costmodel import CostModel
    from engine.offline.replay import RecordedStep, recorded_steps, walk

    g = torch.Generator().manual_seed(0)
    for trial in range(40):
        W = int(torch.randint(1, 17, (1,), generator=g))
        b = [1, 2, 4][trial % 3]
        scores = torch.rand(W, generator=g).tolist()
        st = RecordedStep(n=W, W=W, q=[0.5] * W, ent=[1.0] * W, s={"main": scores}, request=0, temperature=0.0)
        t0, rho, cap = 0.3 + 0.1 * (trial % 4), [1.0, 1.1][trial % 2], [8, 16][trial % 2]
        for trim in (0, 1):
            if b > cap:
                continue
            [row] = walk(recorded_steps([st], "main"), sim.pacer(b, t0, rho, cap, trim), CostModel.flat(0.1))
            pol = Pacer(block=b, threshold=t0, rho=rho, max_window=cap, model=FixedScores(scores + [0.0] * 16),
                        trim=trim)
            n, f = run_blocks(pol, min(W, cap))
            dropped = pol.drop_on_stop() if f["stop"] == "pre_verify" else 0
            assert (row["window"], row["mb_calls"], row["drafted"]) == (n - dropped, len(f["blocks"]), n)
    with pytest.raises(ValueError, match="use_scores"):  # no M_B and no scores: refused, never guessed
        run_blocks(sim.pacer(1, 0.5, 1.0, 8), 4)


def test_replay_arithmetic():
    from engine.offline import pacer_sweep as sim
    from engine.offline.costmodel import CostModel
    from engine.offline.replay import RecordedStep

    cost = CostModel.from_ms(1.0, [10.0 + k for k in range(17)])
    st = [RecordedStep(n=2, W=16, q=[0.9] * 16, ent=[0.1] * 16, s={}, request=0, temperature=0.0)]
    r = sim.replay(st, "fixed:4", cost)  # 2 accepted + 1 emitted; cost 4·1 + t_v(5)=14 ms
    assert r["mean_emitted_per_call_incl_bonus"] == 3 and r["speedup"] == pytest.approx(10.0 * 3 / 18) and r["wasted_per_call"] == 2
    o = sim.replay(st, "oracle:a", cost)  # w = 2: cost 2 + t_v(3) = 14
    assert o["speedup"] == pytest.approx(10.0 * 3 / 14) and o["wasted_per_call"] == 0
    # heuristic (start 5, +2/−1): state carries across the steps of a request and resets per request
    two = [RecordedStep(n=16, W=16, q=[0.9] * 16, ent=[0.1] * 16, s={}, request=r, temperature=0.0) for r in (0, 0, 1)]
    assert sim.replay(two, "heuristic", cost)["mean_window"] == pytest.approx((5 + 7 + 5) / 3)


def test_perfect_preverifier_is_pacer_with_an_exact_mb():
    """The ceiling rule = the real PACER rule (b = 1, trim = 1) fed scores 1 for accepted tokens and 0
    for rejected ones, and it pays exactly one draft forward + one M_B call more than the oracle."""
    from engine.offline import pacer_sweep as sim
    from engine.offline.costmodel import CostModel
    from engine.offline.replay import EXACT_SCORES, RecordedStep

    g = torch.Generator().manual_seed(1)
    cost = CostModel.from_ms(1.0, [10.0 + k for k in range(17)], 0.5)
    for trial in range(60):
        W = int(torch.randint(1, 17, (1,), generator=g))
        n = int(torch.randint(0, W + 1, (1,), generator=g))
        cap = [4, 8, 16][trial % 3]
        st = [RecordedStep(n=n, W=W, q=[0.5] * W, ent=[1.0] * W, s={"main": [float(i < n) for i in range(W)]},
                           request=0, temperature=0.0)]
        want = sim.replay(st, sim.pacer(1, 0.5, 1.0, cap, 1), cost)  # fed the exact scores under "main"
        assert sim.replay(st, sim.perfect_preverifier(cap), cost, EXACT_SCORES) == want
        if n < min(cap, W) and n + 1 < cap:  # token n+1 exists and is scored (no M_B call at the cap): dropped
            o = sim.replay(st, "oracle:a", cost)
            p = sim.replay(st, sim.perfect_preverifier(cap), cost, EXACT_SCORES)
            assert p["mean_window"] == o["mean_window"] == n and p["wasted_per_call"] == 1
    st = [RecordedStep(n=2, W=16, q=[0.9] * 16, ent=[0.1] * 16, s={"main": [1.0] * 16}, request=0, temperature=0.0)]
    r = sim.replay(st, sim.perfect_preverifier(), cost, EXACT_SCORES)  # drafts 3, verifies 2: 3·1 + t_v(3)=12 + 3·0.5
    assert r["speedup"] == pytest.approx(10.0 * 3 / 16.5) and r["wasted_per_call"] == 1
    rows = sim.ceiling(st, CostModel.from_ms(1.0, [10.0 + k for k in range(17)]), factors=(1.0, 0.0))
    assert rows[0]["perfect_over_oracle"] < 1.0 and rows[1]["perfect_over_oracle"] == pytest.approx(1.0)


def test_parse_policy_knows_pacer():
    with pytest.raises(ValueError, match="no parameter 'bogus'"):
        parse_policy("pacer:bogus=1")


def test_cli_decode_with_pacer(model_dirs, tmp_path):
    from engine.__main__ import main
    from engine.trace.format import load_trace

    t, d, prompts = model_dirs
    w = tmp_path / "w.safetensors"
    save_weights(tiny_mb(), w)
    out = tmp_path / "trace.jsonl"
    assert main(["decode", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--dtype", "fp32",
                 "--max-new-tokens", "16", "--policy", f"pacer:b=2,t=0.5,rho=1.1,max=8,weights={w}",
                 "--out", str(out)]) == 0
    tr = load_trace(out)
    assert tr.header["policy"]["name"] == "pacer"
    assert all("blocks" in s["policy_fields"] for s in tr.steps)
    # `pacer eval --traces`: M_B's share of decode time and the stop reasons, summed from the steps
    ev = tmp_path / "eval.json"
    assert main(["pacer", "eval", "--traces", str(out), "--out", str(ev)]) == 0
    got = json.loads(ev.read_text())["traces"][str(out)]
    mb = sum(s["policy_fields"]["mb_ms"] for s in tr.steps)
    assert got["mb_ms"] == pytest.approx(mb) and 0 < got["mb_share"] < 1
    assert sum(got["stops"].values()) == len(tr.steps) == got["steps"]
    assert main(["decode", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--out",
                 str(tmp_path / "x.jsonl"), "--policy", f"pacer:weights={tmp_path / 'nope.safetensors'}"]) == 2


def test_cli_bench_with_pacer_variant(model_dirs, tmp_path):
    from engine.__main__ import main

    t, d, prompts = model_dirs
    w = tmp_path / "w.safetensors"
    save_weights(tiny_mb(), w)
    out, md = tmp_path / "b.json", tmp_path / "b.md"
    assert main(["pacer", "bench", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--per-task", "1",
                 "--max-new-tokens", "10", "--configs", "ar;fixed:2;pacer-tiny:b=2,t=0.5,max=6", "--variant",
                 f"tiny={w}", "--temperatures", "0,0.7", "--dtype", "fp32", "--warmup", "0", "--out", str(out),
                 "--markdown", str(md)]) == 0
    res = json.loads(out.read_text())
    assert not res["greedy_mismatches"] and res["question_ids"] == [81, None]
    assert {r["config"] for r in res["rows"]} == {"ar", "fixed:2", "pacer-tiny:b=2,t=0.5,max=6"}
    assert "pacer-tiny" in md.read_text()


def test_shard_claims_are_exclusive(tmp_path):
    from engine.train.pacer.data import _claim

    p = tmp_path / "train-00000.safetensors"
    assert _claim(p) and not _claim(p)  # a second worker skips the shard
    p.write_bytes(b"x")
    (tmp_path / "train-00000.safetensors.lock").unlink()
    assert not _claim(p)  # finished shards are never claimed


def test_pacer_trim_under_sampling_needs_b1(tiny_target, tiny_draft):
    """b > 1: dropping a block reads states computed from the block's own tokens, a filter by value
    with no closed-form kept law: refused at T > 0. b = 1 decides before the token is drawn: allowed."""
    target, draft = HFModel(tiny_target, "t"), HFModel(tiny_draft, "d", want_hidden=True)
    cfg = DecodeConfig(max_new_tokens=8, sampling=SamplingConfig(temperature=0.7, seed=0))
    pol = Pacer(block=2, threshold=0.5, rho=1.0, max_window=8, model=FixedScores([0.1] * 32), trim=1)
    with pytest.raises(ValueError, match="exact for greedy decoding only"):
        list(decode(target, draft, [3, 17, 5, 9], pol, cfg))
    pol.trim = 0  # the untrimmed rule verifies every drafted token: fine under sampling
    assert sum(s.emitted for s in decode(target, draft, [3, 17, 5, 9], pol, cfg)) == 8
    one = Pacer(block=1, threshold=0.5, rho=1.0, max_window=8, model=FixedScores([0.1] * 32), trim=1)
    steps = list(decode(target, draft, [3, 17, 5, 9], one, cfg))
    assert sum(s.emitted for s in steps) == 8 and all(s.window == 0 for s in steps)  # every draft dropped


def test_pacer_reads_the_pre_sample_confidence():
    """M_B's confidence input is max_x q(x) (DraftInfo.q_max), not the sampled token's q(x)."""
    seen = []

    class Spy(FixedScores):
        def score_step(self, hidden, q, ent):
            seen.append(q.tolist())
            return super().score_step(hidden, q, ent)

    pol = Pacer(block=1, threshold=0.5, rho=1.0, max_window=4, model=Spy([0.9] * 8))
    pol.reset()
    pol.propose()
    pol.keep_drafting(DraftInfo(1, 0, 0.2, 0.1, torch.zeros(H), 0.7))
    assert seen[-1] == pytest.approx([0.7])
