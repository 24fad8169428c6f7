"""Offline analysis: hindsight data, the one replay of window policies, the one cost model.

    hindsight.py       the target's own run + the draft teacher-forced along it (also the oracle policy's look-ahead)
    reference.py       builds a reference run from it; reference_file.py reads and validates one (no torch)
    steps.py           PACER's recorded fixed-window steps: reader, packing, M_B scores
    replay.py          the one walk: any policy over a reference or over recorded steps
    costmodel.py       cost(γ) = γc + v(γ) (+ M_B calls), closed forms
    analysis.py        window tables over references; pacer_sweep.py PACER's sweep over recorded steps
"""
