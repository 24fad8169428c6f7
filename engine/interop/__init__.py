"""Other tools' runs in, our traces out (docs/interop.md).

    specbench   Spec-Bench answer files ⇄ traces (import marks what the file lacks)
    speed       Spec-Bench's speed.py metric: mean of per-question throughputs, and the speedup
    bounds      what accepted lengths alone say about per-step windows (renewal-reward bound)
    cli         `python -m engine import specbench FILE …`

HF assisted generation is recorded by engine.bench.hf_record (it needs torch; this package does not).
"""
