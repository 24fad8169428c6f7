"""Drafters: how a step's draft block(s) are produced.

    reset(prompt_ids)                        new request: prefill
    propose(seq, cap, policy, sampling, gen) → Proposal (K ≥ 1 draft blocks and their q rows)
    commit(keep, chosen)                     after verification: keep `keep` positions of the chosen path
    observe(target)                          optional: read target state after verification
                                             (block drafters condition on the target's hidden states)

`AutoregressiveDrafter` wraps any `LM` (one token per draft forward). Multi-draft and block drafters
implement the same protocol, so `engine.decode.decode` stays the only decode loop. Model-free
drafters (`lookup`, `suffix`: engine.drafters.modelfree) copy from the context and propose a one-hot q.
"""

from engine.drafters.base import AutoregressiveDrafter, Proposal, as_drafter

__all__ = ["AutoregressiveDrafter", "Proposal", "as_drafter"]
