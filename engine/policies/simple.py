"""The simple window rules: no weights, no look-ahead — each reads only the current step's DraftInfo.

| spec            | rule                                                                  | from                     |
|-----------------|-----------------------------------------------------------------------|--------------------------|
| fixed:γ         | always draft γ                                                        | Leviathan et al. 2023    |
| heuristic:γ0    | start at γ0; +2 if every draft was accepted, else −1 (floor 1)        | HF assisted generation   |
| confidence:t    | stop after a drafted token whose draft probability q(x) < t (0.4); `trim=1` drops it; `refit=1` re-fits t online (ROC) | HF ConfidenceCriteria    |
| cumulative:t    | stop when 1 − Π q(x_i) > t, draft confidence as the acceptance estimate | SpecDec++ (threshold rule)|
| entropy:H       | stop after a drafted token whose draft entropy H(q) > H nats          | DISCO/AdaEDL-style       |
| matchlen:f      | model-free drafts: γ ≤ f·match_len + offset; stop when the path score < p | SuffixDecoding            |

The interface they implement, and why `kept_proposal` exists, is in engine.policies.base; they are
registered there by name ("fixed": "engine.policies.simple:Fixed", …) and built by `parse_policy`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.policies.base import DraftInfo, WindowPolicy, is_whole

if TYPE_CHECKING:  # policies never need torch at import time: the app's analysis pages stay torch-free
    import torch


class Fixed(WindowPolicy):
    """Draft exactly γ tokens every step (Leviathan et al.). Default γ = 4: best fixed γ for a draft
    with α ≈ 0.5–0.7 and cost ratio c ≈ 0.05–0.1 by S(α,γ,c) = (1−α^{γ+1})/((1−α)(γc+1))."""

    name = "fixed"

    def __init__(self, gamma: int = 4) -> None:
        super().__init__(max_window=gamma)

    @property
    def params(self) -> dict[str, Any]:
        return {"gamma": self.max_window}

    @property
    def spec(self) -> str:
        return f"fixed:{self.max_window}"


class Heuristic(WindowPolicy):
    """HF's "heuristic" schedule: γ ← γ+2 when all drafts were accepted, else γ ← max(1, γ−1).

    Start γ0 = 5 (HF's historical `num_assistant_tokens` default); cap `max` = 16 because verify cost
    on CPU grows past ~8–16 tokens. State resets per request (HF's "heuristic_transient")."""

    name = "heuristic"

    def __init__(self, start: int = 5, max_window: int = 16) -> None:
        super().__init__(max_window)
        if not is_whole(start) or not 1 <= start <= max_window:
            raise ValueError(f"heuristic start must be an integer in [1, max={max_window}], got {start}")
        self.start = start
        self.gamma = start

    @property
    def params(self) -> dict[str, Any]:
        return {"start": self.start, "max": self.max_window}

    def reset(self) -> None:
        super().reset()
        self.gamma = self.start

    def propose(self) -> int:
        self._fields["gamma"] = self.gamma
        return self.gamma

    def update(self, result: Any, drafted: int) -> None:
        if drafted and result.accepted == drafted:
            self.gamma = min(self.max_window, self.gamma + 2)
        else:
            self.gamma = max(1, self.gamma - 1)


class Confidence(WindowPolicy):
    """Stop after a drafted token with q(x) < t (HF `assistant_confidence_threshold`, default 0.4).
    The low-confidence token itself is still verified, as in HF's ConfidenceCriteria; with `trim=1`
    it is dropped instead (verifying it costs more than it is likely to return where a multi-token
    verify is expensive, e.g. on CPUs whose 2-token forward costs ~1.7 single-token forwards)."""

    name = "confidence"

    def __init__(self, threshold: float = 0.4, max_window: int = 16, trim: int = 0, refit: int = 0) -> None:
        super().__init__(max_window)
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"confidence threshold must be in [0, 1], got {threshold}")
        if trim not in (0, 1):
            raise ValueError(f"confidence trim must be 0 or 1, got {trim!r}")
        if refit not in (0, 1):
            raise ValueError(f"confidence refit must be 0 or 1, got {refit!r}")
        if refit and trim:
            # kept_proposal must know the keep set at draw time; a threshold that moves between steps
            # is fine for that, but HF's re-fit never trims, and the pair has not been validated.
            raise ValueError("confidence refit=1 re-fits HF's untrimmed rule; it does not combine with trim=1")
        self.threshold = self.start = threshold
        self.trim = int(trim)
        self.refit = int(refit)
        self._probs: list[float] = []  # this request's verified drafts: q(x_i) …
        self._matches: list[int] = []  # … and whether each was accepted (HF's probs / matches)
        self._step: list[float] = []

    @property
    def params(self) -> dict[str, Any]:
        out = {"threshold": self.start, "max": self.max_window}
        if self.trim:
            out["trim"] = 1
        if self.refit:
            out["refit"] = 1
        return out

    def reset(self) -> None:
        super().reset()
        self.threshold = self.start
        self._probs, self._matches, self._step = [], [], []

    def propose(self) -> int:
        self._step = []
        if self.refit:
            self._fields["threshold"] = round(self.threshold, 6)
        return self.max_window

    def update(self, result: Any, drafted: int) -> None:
        """HF's online re-fit (`update_candidate_strategy`, PR #34156): every verified draft up to and
        including the first rejection is a sample (q(x_i), accepted?); once > 5 samples hold both
        classes, t ← the ROC threshold minimising fpr + 3·fnr (a missed acceptance costs 3× a
        wasted draft). Post-rejection drafts are not samples (their fate was decided by another token).
        State resets per request, like the heuristic's "transient" schedule."""
        if not self.refit or not drafted:
            return
        n = int(result.accepted)
        seen = min(drafted, n + 1)
        self._probs.extend(self._step[:seen])
        self._matches.extend([1] * min(n, seen) + [0] * (seen - min(n, seen)))
        if len(self._probs) > 5 and 0 in self._matches and 1 in self._matches:
            self.threshold = roc_threshold(self._probs, self._matches)

    def drop_on_stop(self) -> int:
        if self.trim:
            self._fields["dropped"] = 1
        return self.trim

    def kept_proposal(self, q: "torch.Tensor") -> "torch.Tensor":
        """trim=1 keeps x only if q(x) ≥ t, so a verified draft was drawn from q·1[q ≥ t] / Z.

        The keep set must be the one `keep_drafting` applies, decided in the same precision: q is a
        float32 row but t a Python double, and `q >= t` on a float32 tensor would round t to float32
        first. For t that rounds down (0.45 → 0.44999998…) a token at exactly float32(t) would be
        dropped by the loop yet counted in Z here. Both sides therefore compare in float64."""
        if not self.trim:
            return q
        kept = q * (q.double() >= self.threshold)
        z = kept.sum()
        return kept / z if z > 0 else q  # z > 0 whenever a token was kept (its own q ≥ t)

    def keep_drafting(self, info: DraftInfo) -> bool:
        self._step.append(info.q_token)
        # q_token is float(q[x]) of the float32 row: exact in float64, so this matches kept_proposal.
        if info.q_token < self.threshold:
            self._fields["stop"] = "low_confidence"
            return False
        return True


def roc_threshold(scores: list[float], labels: list[int], fn_cost: float = 3.0) -> float:
    """The score threshold t minimising fpr(t) + fn_cost·fnr(t), where a sample is predicted positive
    iff score ≥ t; candidates are the distinct scores, scanned from the highest (ties: the highest t,
    as a ROC curve lists them).

    Example: scores [0.9, 0.8, 0.3, 0.2], labels [1, 1, 0, 1] → costs 0.9: 0 + 3·2/3 = 2, 0.8: 0 + 3·1/3
    = 1, 0.3: 1 + 3·1/3 = 2, 0.2: 1 + 0 = 1 → t = 0.8 (the tie with 0.2 goes to the higher t)."""
    pos = sum(labels)
    neg = len(labels) - pos
    if not pos or not neg:
        raise ValueError("roc_threshold needs both accepted and rejected samples")
    pairs = sorted(zip(scores, labels), key=lambda x: -x[0])
    # Costs scaled by pos·neg stay whole numbers, so ties compare exactly (fp/neg + 3·(1 − tp/pos) would not).
    best_t, best_cost = float("inf"), fn_cost * pos * neg  # t = +inf: nothing predicted positive (fnr 1)
    tp = fp = 0
    i = 0
    while i < len(pairs):
        t = pairs[i][0]
        while i < len(pairs) and pairs[i][0] == t:
            tp += pairs[i][1]
            fp += 1 - pairs[i][1]
            i += 1
        cost = fp * pos + fn_cost * (pos - tp) * neg
        if cost < best_cost:
            best_t, best_cost = t, cost
    return best_t


class Cumulative(WindowPolicy):
    """SpecDec++'s threshold rule with draft confidence as the acceptance estimate:
    stop when P(some draft rejected) ≈ 1 − Π_i q(x_i) exceeds t.

    Default t = 0.6: with our CPU cost ratios (c ≈ 0.1) longer drafts pay off, so the stop is looser
    than SpecDec++'s 0.3 (which used a trained acceptance head, not raw draft confidence)."""

    name = "cumulative"

    def __init__(self, threshold: float = 0.6, max_window: int = 16) -> None:
        super().__init__(max_window)
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"cumulative threshold must be in (0, 1), got {threshold}")
        self.threshold = threshold
        self._survive = 1.0

    @property
    def params(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "max": self.max_window}

    def propose(self) -> int:
        self._survive = 1.0
        return self.max_window

    def keep_drafting(self, info: DraftInfo) -> bool:
        self._survive *= info.q_token
        self._fields["reject_prob"] = round(1.0 - self._survive, 6)
        if 1.0 - self._survive > self.threshold:
            self._fields["stop"] = "cumulative_reject"
            return False
        return True


class Entropy(WindowPolicy):
    """Stop after a drafted token whose draft distribution has entropy H(q) > H_max nats.

    Default H_max = 1.5 nats (≈ 4.5 equally likely tokens): above it the draft is guessing. Entropy
    stops are the training-free family of DISCO/AdaEDL; AdaEDL's exact bound is not confirmed, so we
    use the plain entropy threshold."""

    name = "entropy"

    def __init__(self, threshold: float = 1.5, max_window: int = 16) -> None:
        super().__init__(max_window)
        if not threshold > 0:
            raise ValueError(f"entropy threshold must be > 0, got {threshold}")
        self.threshold = threshold

    @property
    def params(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "max": self.max_window}

    def keep_drafting(self, info: DraftInfo) -> bool:
        if info.entropy > self.threshold:
            self._fields["stop"] = "high_entropy"
            return False
        return True


class MatchLen(WindowPolicy):
    """Window from the model-free drafter's match: γ ≤ ⌊factor · match_len + offset⌋ (≥ 1, ≤ max), and
    stop once the drafter's path score falls below p.

    SuffixDecoding's rule (Arctic Inference `max_spec_factor` / `max_spec_offset` / `min_token_prob`):
    a long matched context predicts a long correct copy, a 1-token match a short one. Defaults factor
    = 1, offset = 0, p = 0 (score gate off). Both signals are functions of the context alone, so the
    stop never depends on a random draw and sampling stays exact. With a model draft (no match
    length) it is a fixed cap `max`."""

    name = "matchlen"

    def __init__(self, factor: float = 1.0, offset: float = 0.0, max_window: int = 16, p: float = 0.0) -> None:
        super().__init__(max_window)
        if not factor > 0 or not -64 <= offset <= 64:
            raise ValueError(f"matchlen needs factor > 0 and offset in [-64, 64], got {factor!r}, {offset!r}")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"matchlen p must be in [0, 1], got {p!r}")
        self.factor, self.offset, self.p = factor, offset, p

    @property
    def params(self) -> dict[str, Any]:
        out = {"factor": self.factor, "offset": self.offset, "max": self.max_window}
        if self.p:
            out["p"] = self.p
        return out

    def keep_drafting(self, info: DraftInfo) -> bool:
        if info.match_len is None:
            return True
        limit = max(1, min(self.max_window, int(self.factor * info.match_len + self.offset)))
        self._fields["limit"] = limit
        if info.score is not None and info.score < self.p:
            self._fields["stop"] = "low_score"
            return False
        if info.index >= limit:
            self._fields["stop"] = "match_limit"
            return False
        return True
