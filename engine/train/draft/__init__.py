"""Training the small draft model (distillation data generation and fit)."""
