"""Window policies: how many tokens to draft before the next target verify call.

One small interface, shaped like HF's ``get_candidates`` / ``update_candidate_strategy``:

    reset()                  start of a request (policies keep state only within a request)
    propose() -> int         the cap γ_max for this step's draft (γ = window)
    keep_drafting(info)      after each drafted token: False stops drafting (that token is still verified …)
    drop_on_stop() -> int    … unless the policy asks, right after a False, to drop that many trailing
                             drafted tokens before verification (0 by default; `trim=1` on confidence and
                             pacer); a step whose every draft is dropped is an autoregressive step.
    kept_proposal(q) -> q'   the distribution a *verified* draft was really drawn from, given that the
                             policy kept it (identity by default).

Why kept_proposal: a rule that drops x_i because of x_i's own value changes the conditional law of the
tokens it keeps. With keep(x) = 1[q(x) ≥ t] a verified x_i was drawn from q'(x) = q(x)·keep(x) / Z, and
verifying with q' instead of q is what keeps sampling lossless (dropped positions fall to the target's
own sample, p). A rule that decides before x_i is drawn (PACER with b = 1 reads only states fixed before
the sample) keeps q' = q. A rule whose keep set cannot be written down per position (PACER's block
score for b > 1, which reads states computed from the block's own tokens) is exact only for greedy
decoding; `decode` refuses it under sampling.
    update(result, drafted)  learn from the verify result
    step_fields() -> dict    policy-specific values for the trace (thresholds, scores, stop reasons)
    keep_block(infos)        (kept, fields) for a run of tokens a drafter scored itself (phrases, no hidden
                             states): per-token keep_drafting by default; PACER applies its block rule
    needs() -> Needs         what the policy asks of a run (greedy only, draft hidden states, exact under
                             sampling, the draft hidden sizes it reads), read by engine.spec.RunSpec.check
                             before anything loads and by decode
    for_request(ctx)         the policy for one request (self by default; the hindsight oracle builds its
                             look-ahead here, before the request's clock starts)

In a decode run only `engine.decode` calls these methods: a drafter gets a `keep(info) -> bool`
callback and plain values from it (engine.drafters.base.Keep), never the policy. The offline replay
(engine.offline) drives the same methods on recorded steps.

Where the policies live: the simple rules (fixed, heuristic, confidence, cumulative, entropy,
matchlen) in engine.policies.simple, PACER in engine.policies.pacer, the cost-aware window in
engine.policies.costaware, the hindsight oracle in engine.policies.oracle. This module holds the
interface and the registry `POLICIES` of lazy
"module:Class" names, so importing it imports no policy (and no torch), and no policy module
imports another. `parse_policy("confidence:0.3,max=12")` builds a policy from a CLI spec;
`register_policy` adds one at run time (plugins: engine.bench.sweep PLUGIN_MODULES).
"""

from __future__ import annotations

import importlib
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # policies themselves never need torch; keeps the app's analysis pages torch-free
    import torch

    from engine.cost import StepCost


@dataclass(frozen=True)
class Needs:
    """What a window policy asks of a run, declared once (`WindowPolicy.needs`) and read by
    `engine.spec.RunSpec.check` (before any model loads) and `engine.decode.decode`."""

    greedy_only: bool = False  # defined for T = 0 only (the hindsight oracle)
    hidden: bool = False  # reads the draft's last-layer hidden states (PACER's M_B)
    exact_under_sampling: bool = True  # False: drops drafts by their own value, lossless at T = 0 only
    # Draft hidden sizes the policy can read (None: any): PACER's M_B was trained for one size.
    hidden_sizes: tuple[int, ...] | None = None
    # Look-ahead computed per request from a plain draft model (the hindsight oracle): K = 1 only.
    lookahead: bool = False

    def refusals(self, label: str, greedy: bool, drafter_hidden: bool = True, drafter: str = "draft",
                 draft_hidden_size: int | None = None) -> list[str]:
        """Why this policy (`label`: its spec as the user spelt it) cannot run with this sampling and
        drafter, one line each; [] when it can. The one statement of these rules: engine.spec and
        engine.decode both ask it."""
        out = []
        if not greedy and self.greedy_only:
            out.append(f"{label!r} is defined for greedy decoding only (T = 0)")
        if not greedy and not self.exact_under_sampling:
            out.append(f"{label!r} drops drafts by value, exact for greedy decoding only: at T > 0 use trim=0, "
                       "pacer with b=1, or confidence:t,trim=1 (which corrects its proposal)")
        if self.hidden and not drafter_hidden:
            out.append(f"{label!r} reads draft hidden states; the {drafter} drafter has none")
        elif (self.hidden and self.hidden_sizes is not None and draft_hidden_size is not None
              and draft_hidden_size not in self.hidden_sizes):
            sizes = ", ".join(f"{n}-dim" for n in self.hidden_sizes)
            out.append(f"{label!r} reads {sizes} draft hidden states; this draft's are {draft_hidden_size}-dim "
                       "(use the pair its pre-verifier was trained for, or weights=PATH)")
        return out


@dataclass(frozen=True)
class RequestContext:
    """What `WindowPolicy.for_request` may read: the loaded pair and one request's prompt."""

    target: Any
    draft: Any
    prompt_ids: list[int]
    max_new_tokens: int
    eos_ids: tuple[int, ...] = ()
    # (y, ŷ) of engine.hindsight, computed by engine.run.policy_for when needs().lookahead (the oracle):
    # this floor cannot run the decode loop itself.
    lookahead: tuple[list[int], list[int]] | None = None
    temperature: float = 0.0  # the request's sampling temperature: acceptance learnt at one does not hold at another
    # The pair's shared state (engine.policies.pair_costs.PairBook: its measured costs, pooled acceptance),
    # handed in by the run (engine.run.policy_for) so that a policy keeps no registry of its own; None: no pair.
    book: Any = None  # a PairBook (not imported here: pair_costs stands on this module)
    # Prompt tokens the drafter reads before its first draft (its lazy prefill): the whole prompt, or less
    # through a draft context window (engine.drafters.autoregressive.DraftContext); None: the whole prompt.
    draft_prompt_len: int | None = None

    @property
    def first_catchup(self) -> int:
        return len(self.prompt_ids) if self.draft_prompt_len is None else self.draft_prompt_len


@dataclass(frozen=True)
class DraftInfo:
    """What a policy may look at after drafting token number `index` (1-based) of this step."""

    index: int
    token: int
    q_token: float  # draft probability of the drafted token
    entropy: float  # draft entropy (nats) of the distribution it was drawn from
    hidden: "torch.Tensor | None" = None  # draft last-layer hidden state that produced q (if requested)
    # max_x q(x): the draft's confidence *before* it samples. Equal to q_token under greedy; a rule that
    # reads it instead of q_token decides without looking at the sampled token (exact trimming, see Pacer).
    q_max: float | None = None
    # Model-free drafters (engine.drafters.modelfree): length of the context suffix the copy was matched
    # on, and the drafter's own score of this token (suffix: continuation frequency); q_token is then 1.
    match_len: int | None = None
    score: float | None = None


def is_whole(v: Any) -> bool:
    """An integer (Python or numpy), not a bool and not a float that happens to be whole."""
    if isinstance(v, bool):
        return False
    try:
        operator.index(v)
        return True
    except TypeError:
        return False


class WindowPolicy:
    name = "base"
    needs_hidden = False  # True asks the decode loop to return draft hidden states

    def __init__(self, max_window: int = 16) -> None:
        # A spec such as fixed:4.5 parses as a float, and a window must be whole (numpy ints are fine).
        if not is_whole(max_window) or not 1 <= max_window <= 64:
            raise ValueError(f"max window must be an integer in [1, 64], got {max_window}")
        self.max_window = max_window
        self._fields: dict[str, Any] = {}

    @property
    def params(self) -> dict[str, Any]:
        return {"max": self.max_window}

    @property
    def spec(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.name}:{extra}" if extra else self.name

    def reset(self) -> None:
        self._fields = {}

    def propose(self) -> int:
        return self.max_window

    def keep_drafting(self, info: DraftInfo) -> bool:
        return True

    def drop_on_stop(self) -> int:
        """Trailing drafted tokens to discard after keep_drafting returned False (never verified)."""
        return 0

    # True when kept_proposal makes trimming exact under sampling (False: greedy only).
    trim_exact_when_sampling = True

    def kept_proposal(self, q: "torch.Tensor") -> "torch.Tensor":
        """q' of a kept (verified) draft position; identity for rules that never drop by value."""
        return q

    def needs(self) -> Needs:
        """What this policy asks of a run. The default reads the two class flags above, so a policy
        that only sets `needs_hidden` / `trim_exact_when_sampling` needs no override."""
        return Needs(hidden=self.needs_hidden, exact_under_sampling=self.trim_exact_when_sampling)

    def for_request(self, ctx: RequestContext) -> "WindowPolicy":
        """The policy that decodes one request (called before the request's clock starts). Policies
        keep state only within a request (reset), so the default is this instance."""
        return self

    def price_with(self, cost: "StepCost") -> None:
        """The offline replay (engine.offline.replay.walk) prices its steps with `cost` (engine.cost.StepCost)
        before walking this policy. A policy that prices its own steps from timings (costaware) prices with
        the replay's costs instead; every other policy ignores costs (the default)."""

    def keep_block(self, infos: list[DraftInfo]) -> tuple[int, dict[str, Any]]:
        """(tokens kept, fields) for a run of tokens the drafter scored itself (a phrase: q = δ, the
        drafter's score in `info.score`, no hidden states). Default: keep_drafting token by token,
        stopping after the first False (that token is kept, as for a drawn token; nothing is dropped
        by value); fields["stop"] = "policy" then. PACER overrides it with its block rule."""
        for i, info in enumerate(infos):
            if not self.keep_drafting(info):
                return i + 1, {"stop": "policy"}
        return len(infos), {}

    def update(self, result: Any, drafted: int) -> None:
        pass

    def step_fields(self) -> dict[str, Any]:
        out, self._fields = self._fields, {}
        return out


@dataclass(frozen=True)
class _Spec:
    """A registry entry. `target` is the class, or its lazy "module:Class" name, imported on first use:
    the registry names every policy without importing one (no cycle, and no torch for plain rules)."""

    target: "type | str"
    main: str | None  # the positional parameter name in "name:value"
    keys: dict[str, str] = field(default_factory=dict)  # spec key → constructor argument

    @property
    def cls(self) -> type:
        if isinstance(self.target, type):
            return self.target
        module, _, name = self.target.partition(":")
        return vars(importlib.import_module(module))[name]  # the lazy "module:Class" of the registry


# PACER's spec keys (also its weight variants, engine.cli.pacer)
PACER_KEYS = {"b": "block", "t": "threshold", "rho": "rho", "max": "max_window", "weights": "weights", "trim": "trim"}

# name → (class, positional parameter, spec keys). The hindsight oracle builds each prompt's
# look-ahead in `for_request` (engine.policies.oracle).
POLICIES: dict[str, _Spec] = {
    "fixed": _Spec("engine.policies.simple:Fixed", "gamma"),
    "heuristic": _Spec("engine.policies.simple:Heuristic", "start", {"max": "max_window"}),
    "confidence": _Spec("engine.policies.simple:Confidence", "threshold",
                        {"max": "max_window", "trim": "trim", "refit": "refit"}),
    "cumulative": _Spec("engine.policies.simple:Cumulative", "threshold", {"max": "max_window"}),
    "entropy": _Spec("engine.policies.simple:Entropy", "threshold", {"max": "max_window"}),
    "matchlen": _Spec("engine.policies.simple:MatchLen", "factor",
                      {"offset": "offset", "max": "max_window", "p": "p"}),
    "pacer": _Spec("engine.policies.pacer:Pacer", "threshold", PACER_KEYS),
    "oracle": _Spec("engine.policies.oracle:HindsightOracle", None, {"max": "max_window"}),
    "costaware": _Spec("engine.policies.costaware:CostAware", "max_window",
                       {"max": "max_window", "c": "c", "v": "v", "probe": "probe", "ref": "ref", "measure": "measure"}),
}


def register_policy(name: str, cls: "type | str", main: str | None, keys: dict[str, str] | None = None) -> None:
    """Add a policy to the CLI/trace vocabulary at run time (plugins, PACER weight variants):
    `cls` is the class or its "module:Class" name."""
    POLICIES[name] = _Spec(cls, main, keys or {})


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text  # e.g. pacer's weights=PATH


def parse_policy(spec: str) -> WindowPolicy:
    """'fixed:4', 'heuristic', 'confidence:0.3,max=12', 'entropy:2.0' → a policy instance."""
    name, _, rest = spec.strip().partition(":")
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(sorted(POLICIES))}")
    entry = POLICIES[name]
    kwargs: dict[str, Any] = {}
    for part in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = part.partition("=")
        try:
            if not eq:
                if entry.main is None:
                    raise ValueError(f"policy {name!r} takes no positional value")
                kwargs[entry.main] = _number(key)
            elif key in entry.keys:
                kwargs[entry.keys[key]] = _number(value)
            elif key == entry.main:
                kwargs[entry.main] = _number(value)
            else:
                known = [entry.main, *entry.keys] if entry.main else list(entry.keys)
                raise ValueError(f"policy {name!r} has no parameter {key!r} (known: {', '.join(known)})")
        except ValueError as e:
            raise ValueError(f"bad policy spec {spec!r}: {e}") from None
    return entry.cls(**kwargs)
