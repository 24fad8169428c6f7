"""Measurement on real models (their CLIs: engine/cli/):

    bench.py, runner.py          interleaved benchmark: ours vs HF assisted generation (runner: one
                                 config on one prompt)
    multibench.py, multibench_report.py   multi-draft / block verifiers over K, L, T, and their tables
    audit.py, audit_report.py    exact losslessness enumeration of every verifier, and docs/audit.md
    sweep.py, sweep_grid.py, sweep_worker.py, sweep_summary.py   grid sweeps on Ray
    sweep_bench.py, step_probe.py, gpu_check.py, hf_record.py    probes and the HF step recorder

Every per-call figure carries the names of engine.metrics; every timing comes from engine.measure.
"""
