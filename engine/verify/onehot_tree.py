"""`onehot-tree`: lossless verification of a draft tree whose branching positions are deterministic.

For drafters whose K blocks share a sampled prefix and then branch into deterministic continuations
(engine.drafters.phrase: the draft model's tokens, then k phrase candidates from a pool). Blocks may
differ in length. Notation: p = target, q = draft, P a node (a prefix shared by the candidate blocks
P is a prefix of), t the current target law at P (t = p(·|P) on arrival).

At node P with distinct next tokens x_1..x_c (first-seen block order), each carried by its first
block j with draft row q_j = q^j(·|P):

    for x_i in order:  accept x_i w.p. h = min(1, t(x_i)/q_j(x_i));  on rejection t ← norm(max(t − q_j, 0))
    accepted x_i → descend into every block carrying x_i;   none accepted → emit y ~ t
    no block continues past P → emit the bonus y ~ p(·|P)

c = 1 is ordinary speculative sampling at that position, whatever q_j is (the shared sampled prefix).
c > 1 requires every q_j to be one-hot, q_j = δ(x_i): then h = t(x_i) and the residual is t with x_i
removed, so the node emits exactly a draw from t — "sample y ~ p(·|P); if y is a child, follow it" —
and the output law is p (greedy: the longest path of argmax tokens). With stochastic siblings that
is false (they are not fresh i.i.d. draws: the i.i.d. rules RRS/K-SEQ/RBV apply there), so the
verifier refuses them. Differs from RRS (engine.verify.multidraft) in exactly these two points: each
child is tested against its own q row, and duplicates of one token are tested once.

Uniforms (the layout of engine.verify.coins, for ragged blocks): block j's coin at depth d is
u[Σ_{i<j} γ_i + d]; u[Σ γ_i] samples the emitted token.
"""

from __future__ import annotations

from engine.core.sampling import sample_from
from engine.verify.coins import CoinResult, coin, path_stats, positive_part


def verify_onehot_tree(blocks, q, p, uniforms) -> CoinResult:
    K = len(blocks)
    if not K or len(q) != K or len(p) != K:
        raise ValueError(f"{K} blocks but {len(q)} draft and {len(p)} target matrices")
    lens = [len(b) for b in blocks]
    for j in range(K):
        if q[j].shape[0] != lens[j] or p[j].shape[0] != lens[j] + 1:
            raise ValueError(f"block {j}: q {tuple(q[j].shape)}, p {tuple(p[j].shape)} for γ={lens[j]}")
    offs = [sum(lens[:j]) for j in range(K)]
    cands, depth, ledger, fb = list(range(K)), 0, [], False
    h_at: dict[tuple[int, int], float] = {}  # (depth, token) → h of its coin
    while True:
        t = p[cands[0]][depth]
        live = [j for j in cands if lens[j] > depth]
        if not live:  # every remaining block ends here: bonus from p(·|P)
            final, bonus = t, True
            break
        kids: dict[int, int] = {}
        for j in live:
            kids.setdefault(int(blocks[j][depth]), j)
        if len(kids) > 1 and any(float(q[j][depth][x]) != 1.0 for x, j in kids.items()):
            raise ValueError(f"onehot-tree: depth {depth} branches into {len(kids)} tokens whose q is not one-hot; "
                             "branches must be deterministic (use rrs/kseq/rbv for i.i.d. drafts)")
        taken = None
        for x, j in kids.items():
            qx = float(q[j][depth][x])
            h = min(1.0, float(t[x]) / qx) if qx > 0 else 0.0
            h_at[(depth, x)] = h
            if coin(uniforms, offs[j] + depth, h, ledger):
                taken = x
                break
            t, ok = positive_part(t - q[j][depth])
            if not ok:  # only through rounding: a rejection needs t(x) < q(x)
                t, fb = p[cands[0]][depth], True
                break
        if taken is None:
            cands = live  # the chosen block is one that drafted past this node
            final, bonus = t, False
            break
        first = kids[taken]
        cands = [first] + [j for j in live if j != first and int(blocks[j][depth]) == taken]
        depth += 1
    chosen = cands[0]
    block = [int(x) for x in blocks[chosen]]
    last = sample_from(final, float(uniforms[sum(lens)]))
    hs = tuple(h_at.get((d, x), 0.0) for d, x in enumerate(block))
    dec = tuple(1 if d < depth else 0 for d in range(len(block)))
    pd, qd = path_stats(block, q[chosen], p[chosen])
    return CoinResult(depth, tuple(block[:depth]) + (last,), hs, pd, qd, final, bonus,
                      chosen=chosen, decisions=dec, coins=tuple(ledger), fallback=fb)
