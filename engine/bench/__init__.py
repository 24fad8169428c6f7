"""Measurement on real models: interleaved benchmarks, multi-draft, audit, sweeps, probes."""
