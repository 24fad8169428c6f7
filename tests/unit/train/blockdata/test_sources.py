"""Training sources: deterministic interleaving, the held-out split, stdlib code instructions."""

from __future__ import annotations

from engine.train.blockdata.sources import encode, examples, interleave, stdlib_examples
from tests.unit.train.blockdata.toy import IM_END, ByteChatTokenizer, toy_streams


def test_interleave_is_deterministic_and_keeps_the_shares():
    s = toy_streams(40)
    a = interleave(s, {"sharegpt": 0.7, "stdlib": 0.3}, seed=1)
    assert a == interleave(s, {"sharegpt": 0.7, "stdlib": 0.3}, seed=1)
    head = [e.source for e in a[:20]]
    assert head.count("stdlib") == 6
    assert len(a) == 60 and len({e.key for e in a}) == 60


def test_heldout_never_in_train():
    held, train = examples(seed=0, heldout=5, code_share=0.5, streams=toy_streams())
    assert len(held) == 5 and not {e.key for e in held} & {e.key for e in train}


def test_stdlib_examples_are_functions_with_docstrings(tmp_path):
    (tmp_path / "mod.py").write_text('def add(a, b=1):\n    """Add two numbers together and return the '
                                     'arithmetic sum of them."""\n    c = a + b\n    return c\n\n'
                                     'def short(x):\n    """Too short."""\n    return x\n')
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "t.py").write_text((tmp_path / "mod.py").read_text())
    ex = stdlib_examples(tmp_path)
    assert [e.key for e in ex] == ["mod:add"]
    assert "`add(a, b=1)`" in ex[0].prompt and ex[0].answer.startswith("```python\ndef add(a, b=1):")


def test_encode_appends_eos_only_to_complete_answers():
    tok = ByteChatTokenizer()
    e = toy_streams()["sharegpt"][0]
    p, a = encode(tok, e, 200, 1000, IM_END)
    assert a[-1] == IM_END and len(a) == len(e.answer.encode()) + 1
    p, a = encode(tok, e, 200, 10, IM_END)
    assert len(a) == 10 and IM_END not in a
    assert encode(tok, e, 5, 10, IM_END) is None
