"""engine.bench.hf_record: HF assisted generation recorded per step, on a tiny random pair built from configs."""

import pytest
import torch

from engine.bench.hf_record import hf_header, record_assisted
from engine.models.tiny import noisy_copy, tiny_llama
from engine.trace.format import TraceWriter, load_trace

PROMPTS = [[1, 2, 3, 4, 5], [9, 8, 7], [30, 31, 32, 33, 34, 35, 36]]
N = 40


@pytest.fixture(scope="module")
def hf_pair():
    target = tiny_llama(0)
    return target, noisy_copy(target, 1, scale=0.3)  # agrees often enough for windows to grow and shrink


def configure(draft, schedule: str, n: int) -> None:
    gc = draft.generation_config
    gc.num_assistant_tokens_schedule, gc.num_assistant_tokens = schedule, n
    gc.assistant_confidence_threshold = 0.0  # None would mean 0.4 and stop drafting early


def kwargs(x, **extra):
    return dict(do_sample=False, max_new_tokens=N, attention_mask=torch.ones_like(x), **extra)


def test_greedy_heuristic_trace(hf_pair, tmp_path):
    target, draft = hf_pair
    configure(draft, "heuristic", 5)
    header = hf_header(target, draft, kwargs(torch.tensor([PROMPTS[0]])))
    path = tmp_path / "hf.jsonl"
    with TraceWriter(path, header) as w:
        for rid, p in enumerate(PROMPTS):
            x = torch.tensor([p])
            configure(draft, "heuristic", 5)  # HF writes the adapted window back to the assistant's config
            with torch.inference_mode():
                plain = target.generate(x, assistant_model=draft, **kwargs(x))
            configure(draft, "heuristic", 5)
            rec = record_assisted(target, draft, x, kwargs(x), writer=w, request_id=rid)
            assert torch.equal(rec.sequences, plain)  # the hooks change nothing HF does
            with torch.inference_mode():
                greedy = target.generate(x, **kwargs(x))
            assert rec.output_ids == greedy[0, len(p):].tolist()  # and greedy assisted = greedy
            assert sum(s.emitted for s in rec.steps) == len(rec.output_ids) == N
            assert [t for s in rec.steps for t in s.emitted_tokens] == rec.output_ids
            n = [s.policy_fields["num_assistant_tokens"] for s in rec.steps]
            assert n[0] == 5
            for j in range(1, len(rec.steps)):
                prev = rec.steps[j - 1]
                want = n[j - 1] + 2 if prev.accepted == prev.window else max(1, n[j - 1] - 1)
                assert n[j] == want, f"step {j}: window {n[j]} after accepting {prev.accepted}/{prev.window}"
                assert prev.policy_fields["num_assistant_tokens_next"] == n[j]
            for s in rec.steps:  # HF drafts its window unless the token budget is nearer
                assert s.window == s.window_cap == min(s.policy_fields["num_assistant_tokens"], N + len(p) - s.context_len - 1)
                assert s.accepted == s.policy_fields["hf_num_matches"]
                assert s.accept_probs == tuple(1.0 if i < s.accepted else s.accept_probs[i] for i in range(s.window))
                assert (s.bonus is None) != (s.correction is None)
            assert len({s.window for s in rec.steps}) > 1  # the schedule actually moved
            assert rec.steps[-1].finished == "max_new_tokens"
    assert "_get_candidate_generator" not in vars(target)  # the wrapper is gone after the call
    t = load_trace(path)
    assert t.complete and len(t.requests) == len(PROMPTS)
    assert t.header["policy"]["spec"] == "hf:heuristic:5" and t.header["draft"]["vocab_size"] == 64
    assert t.summary["new_tokens"] == N * len(PROMPTS)
    assert all(s["t_draft_ms"] > 0 and s["t_verify_ms"] > 0 for s in t.steps if s["window"] > 0)


def test_constant_schedule_keeps_the_window(hf_pair):
    target, draft = hf_pair
    configure(draft, "constant", 3)
    x = torch.tensor([PROMPTS[1]])
    rec = record_assisted(target, draft, x, kwargs(x))
    assert {s.window for s in rec.steps[:-2]} == {3}
    assert sum(s.emitted for s in rec.steps) == N


def test_sampling_trace_is_valid(hf_pair, tmp_path):
    target, draft = hf_pair
    configure(draft, "heuristic", 4)
    x = torch.tensor([PROMPTS[2]])
    kw = dict(do_sample=True, temperature=0.8, max_new_tokens=N, attention_mask=torch.ones_like(x))
    path = tmp_path / "s.jsonl"
    torch.manual_seed(0)
    with TraceWriter(path, hf_header(target, draft, kw)) as w:
        rec = record_assisted(target, draft, x, kw, writer=w)
    t = load_trace(path)  # the loader checks probabilities in [0, 1], accepted ≤ window, emitted ≤ accepted + 1
    assert t.header["sampling"]["temperature"] == 0.8
    assert sum(s["emitted"] for s in t.steps) == len(rec.output_ids) == N
    for s in rec.steps:
        for i in range(s.accepted):  # an accepted draft is the emitted token
            assert s.draft_tokens[i] == s.emitted_tokens[i]


def test_step_cut_at_eos_still_names_its_final_token(hf_pair, tmp_path):
    """HF drops the correction/bonus of a block cut by EOS; the recorder names the target's argmax
    there (flagged), so the trace keeps the format's either/or and loads."""
    target, draft = hf_pair
    found = None
    for p in PROMPTS + [[i, i + 1] for i in range(10, 60, 5)]:
        x = torch.tensor([p])
        configure(draft, "constant", 4)
        rec = record_assisted(target, draft, x, kwargs(x))
        out, pos = rec.output_ids, 0
        for s in rec.steps:  # a draft accepted inside a block, at its first occurrence in the output
            for i in range(min(s.accepted, s.emitted - 1)):
                if found is None and out.index(s.emitted_tokens[i]) == pos + i:
                    found = (p, s.emitted_tokens[i])
            pos += s.emitted
        if found:
            break
    assert found, "the tiny pair should accept some draft inside a block"
    p, eos = found
    x = torch.tensor([p])
    configure(draft, "constant", 4)
    header = hf_header(target, draft, kwargs(x, eos_token_id=eos, pad_token_id=eos))
    path = tmp_path / "eos.jsonl"
    with TraceWriter(path, header) as w:
        rec2 = record_assisted(target, draft, x, kwargs(x, eos_token_id=eos, pad_token_id=eos), writer=w)
    last = rec2.steps[-1]
    assert last.finished == "eos" and last.emitted_tokens[-1] == eos
    assert last.emitted == last.accepted and last.policy_fields.get("final_token_unobserved")
    assert (last.bonus is None) != (last.correction is None)
    t = load_trace(path)
    assert t.complete and t.steps[-1]["finished"] == "eos"
