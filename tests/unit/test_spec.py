"""engine.spec.RunSpec.check: every refusal, one line each, with no model loaded (pure).

Run alone: python -m pytest tests/unit/test_spec.py -q
"""

from __future__ import annotations

import pytest

from engine.core.lm import TableLM
from engine.policies.base import Needs
from engine.spec import FLAGS, RunSpec


def one(spec: RunSpec, target=None, labels=None) -> str:
    errors = spec.check(target, labels)
    assert len(errors) >= 1, spec
    assert all("\n" not in e for e in errors)  # every refusal is one line
    return errors[0]


def test_a_good_spec_has_no_refusal():
    assert RunSpec(draft="d", policy="fixed:4").check() == []
    assert RunSpec(draft=None, policy="banana").check() == []  # no draft: the policy is not used
    assert RunSpec(draft="d", policy="oracle").check() == []  # greedy, K = 1, a plain draft model
    assert RunSpec(draft="d", policy="pacer:b=1,trim=1", temperature=0.7).check() == []  # b = 1 trims exactly
    assert RunSpec(draft="d", policy="fixed:2", verifier="rbv", k=3).check() == []
    assert RunSpec(draft="lookup:n=10,ngram=2", policy="matchlen:1,offset=2").check() == []


@pytest.mark.parametrize("field, value, words", [
    ("max_new_tokens", 0, "--max-new-tokens must be an integer in [1, 100000], got 0"),
    ("max_new_tokens", 2.5, "--max-new-tokens must be an integer"),
    ("temperature", -1.0, "--temperature must be in [0, 100], got -1.0"),
    ("temperature", float("nan"), "--temperature must be in [0, 100]"),
    ("top_k", -1, "--top-k must be an integer in [0, 1e+07], got -1"),
    ("top_p", 1.5, "--top-p must be in (0, 1], got 1.5"),
    ("top_p", 0.0, "--top-p must be in (0, 1], got 0.0"),
    ("k", 17, "--k must be an integer in [1, 16], got 17"),
    ("seed", -1, "--seed must be an integer in [0, 9.22337e+18], got -1"),
])
def test_numbers_are_refused_with_the_flag_name(field, value, words):
    msg = one(RunSpec(draft="d", **{field: value}), labels=FLAGS)
    assert msg.startswith(words), msg
    assert one(RunSpec(draft="d", **{field: value})).startswith(field)  # default labels: the field names


def test_verifier_and_shadow_names():
    assert one(RunSpec(verifier="nope")).startswith("unknown verifier 'nope'; choose from token")
    assert "nope" in one(RunSpec(draft="d", shadow=("nope:2",)))


def test_k_rules():
    assert one(RunSpec(draft=None, k=3), labels=FLAGS) == "--k 3 needs a draft model and a multi-draft verifier"
    assert one(RunSpec(draft="d", k=3), labels=FLAGS).startswith("--k 3 needs a multi-draft verifier (rrs, kseq")
    for draft in ("lookup", "suffix:n=8", "block:models/none"):
        assert one(RunSpec(draft=draft, verifier="rbv", k=2)).endswith("proposes one block per step: use a K = 1 verifier")
        assert "K = 1 verifier" in one(RunSpec(draft=draft, k=2))


def test_drafter_parameters_are_checked_without_a_model():
    assert "no parameter 'x'" in one(RunSpec(draft="lookup:x=1"))
    assert "block needs a path" in one(RunSpec(draft="block:"))


def test_policy_spec_errors_are_the_policy_parser_s():
    assert one(RunSpec(draft="d", policy="banana")).startswith("unknown policy 'banana'; choose from ")
    assert one(RunSpec(draft="d", policy="fixed:0")) == "max window must be an integer in [1, 64], got 0"
    assert "no parameter 'zz'" in one(RunSpec(draft="d", policy="confidence:0.4,zz=1"))


def test_value_drops_are_greedy_only():
    msg = one(RunSpec(draft="d", policy="pacer:b=2,trim=1", temperature=0.7))
    assert msg.startswith("'pacer:b=2,trim=1' drops drafts by value, exact for greedy decoding only")
    assert RunSpec(draft="d", policy="pacer:b=2,trim=1").check() == []  # greedy: exact
    assert RunSpec(draft="d", policy="pacer:b=2,trim=0", temperature=0.7).check() == []


def test_hidden_states_need_a_model_drafter():
    for draft in ("lookup", "suffix", "block:models/none"):
        msg = one(RunSpec(draft=draft, policy="pacer"))
        assert msg == f"'pacer' reads draft hidden states; the {draft.partition(':')[0]} drafter has none", msg
    assert RunSpec(draft="phrase:model=d", policy="pacer").check() == []  # its model drafts carry hidden states


def test_pacer_hidden_size_is_pacer_s_rule():
    assert RunSpec(draft="d", policy="pacer", draft_hidden_size=576).check() == []
    msg = one(RunSpec(draft="d", policy="pacer", draft_hidden_size=32))
    assert "576-dim" in msg and "896-dim" in msg and "32-dim" in msg
    assert RunSpec(draft="d", policy="fixed:2", draft_hidden_size=32).check() == []  # reads no hidden state


def test_oracle_refusals():
    assert one(RunSpec(draft="d", policy="oracle", temperature=0.7)) == \
        "'oracle' is defined for greedy decoding only (T = 0)"
    assert one(RunSpec(draft="d", policy="oracle", verifier="rbv", k=2)) == \
        "'oracle' is the greedy hindsight window: use a K = 1 verifier"
    assert one(RunSpec(draft="lookup", policy="oracle")) == \
        "'oracle' replays a plain draft model; the model-free drafter is not one"
    assert "phrase drafter is not one" in one(RunSpec(draft="phrase:model=d", policy="oracle"))


def test_check_reads_the_loaded_target_when_given():
    t = TableLM(7)
    assert RunSpec(draft="lookup:n=4").check(t) == []
    assert "/nonexistent/block-drafter" in one(RunSpec(draft="block:/nonexistent/block-drafter"), target=t)
    assert RunSpec(draft="block:/nonexistent/block-drafter").check() == []  # without a target: its path only


def test_every_refusal_is_listed_not_only_the_first():
    errors = RunSpec(draft="d", top_p=2.0, k=0).check()
    assert len(errors) == 2 and errors[0].startswith("top_p") and errors[1].startswith("k ")


def test_needs_refusals_are_the_one_statement():
    """decode and RunSpec.check both read Needs.refusals: the rules are stated once."""
    assert Needs().refusals("x", greedy=False, drafter_hidden=False) == []
    assert Needs(greedy_only=True).refusals("x", greedy=False) == ["'x' is defined for greedy decoding only (T = 0)"]
    assert Needs(greedy_only=True).refusals("x", greedy=True) == []
    assert len(Needs(exact_under_sampling=False).refusals("x", greedy=False)) == 1
    assert Needs(hidden=True).refusals("x", True, drafter_hidden=False, drafter="copy") == \
        ["'x' reads draft hidden states; the copy drafter has none"]
    assert Needs(hidden=True, hidden_sizes=(8,)).refusals("x", True, draft_hidden_size=8) == []


def test_build_gives_the_run_for_a_loaded_target():
    t = TableLM(7)
    run = RunSpec(draft="lookup:n=4", policy="fixed:3", max_new_tokens=5, temperature=0.5, seed=3).build(t)
    assert run.target is t and run.draft.spec.startswith("lookup") and run.policy.spec == "fixed:3"
    assert run.cfg.max_new_tokens == 5 and run.cfg.sampling.temperature == 0.5 and run.cfg.sampling.seed == 3
    assert RunSpec(draft=None).build(t).draft is None


def test_weights_path_is_checked_before_anything_loads():
    from engine.spec import FLAGS, RunSpec

    assert RunSpec(weights="quantized").check() == []
    assert RunSpec(weights="int3").check(labels=FLAGS) == [
        "unknown weights path 'int3'; choose from dense, quantized, int8, int4"]


def test_a_mixed_pair_is_checked_before_anything_loads(monkeypatch):
    """The draft's own weights path (engine.models.pair_weights): only a draft model has one; a path the
    machine cannot run is refused with the rest of the spec."""
    monkeypatch.delenv("SPECLAB_QGEMM", raising=False)
    assert RunSpec(draft="d", weights="dense", draft_weights="quantized", device="cpu").check() == []
    assert "unknown weights path 'fp8'" in one(RunSpec(draft="d", draft_weights="fp8"))
    assert one(RunSpec(draft=None, draft_weights="quantized"), labels=FLAGS) == (
        "--weights draft=quantized: autoregressive decoding has no draft")
    assert "the model-free drafter lookup:n=10 has no weights of its own" in one(
        RunSpec(draft="lookup:n=10", draft_weights="int8"))
    assert RunSpec(draft="lookup:n=10", weights="int8", draft_weights="int8", device="cpu").check() == []
    assert "runs on CPU kernels, not on cuda" in one(RunSpec(draft="d", draft_weights="quantized", device="cuda"))
    monkeypatch.setenv("SPECLAB_QGEMM", "no-such-build")
    assert "not a qgemm build" in one(RunSpec(draft="d", weights="quantized", device="cpu"))


def test_draft_context_rules():
    assert RunSpec(draft="d", draft_context="ctx:256").check() == []
    assert RunSpec(draft="d", draft_context="ctx:256,sink=8", policy="costaware").check() == []
    assert "bad draft context 'ctx:x'" in one(RunSpec(draft="d", draft_context="ctx:x"))
    assert one(RunSpec(draft="lookup:n=4", draft_context="ctx:64"), labels=FLAGS).startswith(
        "--draft-context: a context window is for a draft model; the model-free drafter")
    assert "K = 1 verifier" in one(RunSpec(draft="d", draft_context="ctx:64", verifier="rbv", k=2))
    assert "whole prompt" in one(RunSpec(draft="d", draft_context="ctx:64", policy="oracle"))
    assert one(RunSpec(draft=None, draft_context="ctx:64"), labels=FLAGS) == \
        "--draft-context: autoregressive decoding has no draft to read a window"


def test_build_reads_the_draft_through_its_context_window(monkeypatch):
    """build() wraps the loaded draft model in a drafter that reads the window the spec names."""
    import engine.drafters
    from engine.drafters.autoregressive import AutoregressiveDrafter, DraftContext

    t, d = TableLM(7, seed=1), TableLM(7, seed=2)
    monkeypatch.setattr(engine.drafters, "make_drafter", lambda spec, target, **kw: (target, d))
    run = RunSpec(draft="d", policy="fixed:3", draft_context="ctx:16,sink=2").build(t)
    assert isinstance(run.draft, AutoregressiveDrafter) and run.draft.lm is d
    assert run.draft.context == DraftContext(16, 2) and run.draft.prompt_tokens(100) == 18
    assert RunSpec(draft="d", policy="fixed:3").build(t).draft is d
