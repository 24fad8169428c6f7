"""engine.core.target: TargetBase's default block scoring and commit (K = 1 and K > 1)."""

import torch

from engine.core.target import Target, TargetBase


class _PrefixLM(TargetBase):
    """A cache that remembers its tokens; the logits of position i are a function of the whole prefix,
    so a wrong crop or a missed re-feed changes them."""

    vocab_size = 7

    def __init__(self) -> None:
        self.cache: list[int] = []

    @property
    def length(self) -> int:
        return len(self.cache)

    def reset(self) -> None:
        self.cache = []

    def extend(self, ids):
        out = []
        for t in ids:
            self.cache.append(int(t))
            out.append(torch.tensor([float(sum((i + 1) * x for i, x in enumerate(self.cache)) % (v + 2))
                                     for v in range(self.vocab_size)]))
        return torch.stack(out)

    def crop(self, n: int) -> None:
        self.cache = self.cache[:n]


def _fresh(prefix):
    lm = _PrefixLM()
    lm.extend(prefix)
    return lm


def test_protocol_is_satisfied():
    assert isinstance(_PrefixLM(), Target)


def test_k1_scores_with_one_extend_and_commit_crops():
    lm = _fresh([1, 2, 3])
    (logits,) = lm.score_paths(4, [[5, 6]])
    assert torch.equal(logits, _fresh([1, 2, 3]).extend([4, 5, 6]))
    lm.commit(keep_len=5, last=4, blocks=[[5, 6]], chosen=0, accepted=1)
    assert lm.cache == [1, 2, 3, 4, 5]


def test_k_blocks_score_each_from_the_same_prefix_and_commit_refeeds_the_chosen_path():
    lm = _fresh([1, 2, 3])
    blocks = [[5, 6], [0, 1], [2, 2]]
    scored = lm.score_paths(4, blocks)
    for block, logits in zip(blocks, scored):
        assert torch.equal(logits, _fresh([1, 2, 3]).extend([4] + block))
    assert lm.cache == [1, 2, 3]  # left at S − 1 after sequential scoring
    lm.commit(keep_len=6, last=4, blocks=blocks, chosen=1, accepted=2)
    assert lm.cache == [1, 2, 3, 4, 0, 1]
