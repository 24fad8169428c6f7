"""Draft training: self-distillation data generation (``gen``) and draft distillation (``draft``)."""
