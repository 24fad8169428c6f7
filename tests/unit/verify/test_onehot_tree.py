"""Phrase drafter (engine.drafters.phrase) and its `onehot-tree` verifier: exact pool proposals on
hand-made sequences, the per-step fields, the window-policy gates (fixed, matchlen, PACER's stop rule
on the drafter's scores), greedy exactness on the tiny pair (one chain and k-candidate trees in one
target forward), exact enumeration of the tree verifier, and χ² losslessness of the real loop."""


import numpy as np
import pytest
import torch

from engine.bench.audit import branches
from engine.verify import VERIFIERS, uniforms_needed
from engine.verify.onehot_tree import verify_onehot_tree


# ---------------------------------------------------------------- the tree verifier, exactly


def _toy(vocab, seed):
    memo = {}

    def fn(ctx):
        if ctx not in memo:
            g = torch.Generator().manual_seed(hash((seed,) + ctx) & 0x7FFFFFFF)
            memo[ctx] = (1.5 * torch.randn(vocab, generator=g, dtype=torch.float64)).softmax(0)
        return memo[ctx]

    return fn


def test_onehot_tree_is_lossless_by_exact_enumeration():
    """Depth 0: one sampled model token x ~ q; then two or three deterministic phrase branches that
    depend on x. The law of the first two emitted tokens (completed from p when fewer were emitted)
    must equal p's, for every x weighted by q(x) and every coin."""
    Vt = 4
    p_fn, q_fn = _toy(Vt, 1), _toy(Vt, 2)
    phrases = {0: [[1, 2], [3]], 1: [[1], [0, 3], [2, 2]], 2: [[2, 0]], 3: [[0], [1]]}
    joint = np.zeros((Vt, Vt))
    for x in range(Vt):
        blocks = [[x] + y for y in phrases[x]]
        q = [torch.stack([q_fn(())] + [torch.eye(Vt, dtype=torch.float64)[t] for t in b[1:]]) for b in blocks]
        p = [torch.stack([p_fn(tuple(b[:i])) for i in range(len(b) + 1)]) for b in blocks]
        n_u = uniforms_needed("onehot-tree", [len(b) for b in blocks])

        for prob, res in branches(lambda u: verify_onehot_tree(blocks, q, p, u), n_u, 0):
            w = float(q_fn(())[x]) * prob
            acc = list(res.tokens[:-1])
            fin = res.final_dist.double().numpy()
            if len(acc) >= 2:
                joint[acc[0], acc[1]] += w
            elif len(acc) == 1:
                joint[acc[0]] += w * fin
            else:
                for y in range(Vt):
                    joint[y] += w * fin[y] * p_fn((y,)).numpy()
    want = np.array([[float(p_fn(())[a]) * float(p_fn((a,))[b]) for b in range(Vt)] for a in range(Vt)])
    assert np.abs(joint - want).max() < 1e-12


def test_onehot_tree_refuses_stochastic_branches():
    q = [torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.5]])]
    p = [torch.tensor([[0.5, 0.5], [0.5, 0.5]])] * 2
    with pytest.raises(ValueError, match="one-hot"):
        verify_onehot_tree([[0], [1]], q, p, torch.zeros(3, dtype=torch.float64))
    assert "onehot-tree" in VERIFIERS
