"""Drafters: how a step's draft block(s) are produced (the protocol: engine.drafters.base).

    base.py            protocol, Proposal, Keep (the policy as decode hands it over)
    autoregressive.py  a draft LM, one token per forward
    multi.py           K i.i.d. blocks from one draft LM (multi-draft verifiers)
    block.py           DFlash-style block drafter (network: block_model.py)
    phrase.py          draft model + phrase pool (Ouroboros-style)
    modelfree.py       copy drafters: lookup.py (prompt lookup), suffix.py (suffix trie)
    factory.py         make_drafter(spec, target): every `--draft` spec
"""

from engine.drafters.autoregressive import AutoregressiveDrafter, as_drafter
from engine.drafters.base import KEEP_ALL, Keep, Proposal
from engine.drafters.factory import drafter_kind, is_block, make_drafter

__all__ = ["AutoregressiveDrafter", "KEEP_ALL", "Keep", "Proposal", "as_drafter", "drafter_kind",
           "is_block", "make_drafter"]
