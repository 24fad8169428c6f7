"""Training code: draft distillation for SmolLM2 (``gen``, ``draft``) and the other trainers in this package."""
