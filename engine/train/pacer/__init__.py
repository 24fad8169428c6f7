"""Training PACER's pre-verifier (labels from decode runs, then fit)."""
