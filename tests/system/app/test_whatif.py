"""The what-if grid (app.whatif): every (threshold, K) cell is a replayed confidence policy, read back
from the window table against the best fixed window of the same table and costs."""

from __future__ import annotations

import pandas as pd

from app import whatif


def table() -> pd.DataFrame:
    rows = [{"task": "all", "policy": f"fixed:{g}", "kind": "fixed", "speedup": s} for g, s in ((2, 0.76), (3, 0.78))]
    rows += [{"task": "all", "policy": whatif.SPEC.format(t=t, k=k), "kind": "adaptive", "speedup": 0.7 + t / 10 + k / 100}
             for t in (0.2, 0.6) for k in (2, 8)]
    rows += [{"task": "qa", "policy": whatif.SPEC.format(t=0.6, k=8), "kind": "adaptive", "speedup": 9.0},
             {"task": "all", "policy": "oracle:a", "kind": "oracle", "speedup": 0.95}]
    return pd.DataFrame(rows)


def test_grid_reads_every_cell_of_task_all():
    cells = whatif.grid(table())
    assert len(cells) == 4 and set(cells["K"]) == {2, 8} and set(cells["threshold"]) == {0.2, 0.6}
    top = cells.loc[cells["speedup"].idxmax()]
    assert (top["threshold"], top["K"]) == (0.6, 8) and round(top["over best fixed"], 4) == round(0.84 / 0.78, 4)
    assert whatif.specs((0.5,), (4,)) == ["confidence:threshold=0.5,max=4"]


def test_sentence_and_heatmap():
    cells = whatif.grid(table())
    text = whatif.sentence(cells, 0.78, 3)
    assert text.startswith("Best cell: threshold 0.6, K = 8 at 0.84× AR, which beats the best fixed window (γ = 3")
    assert "does not beat" in whatif.sentence(cells, 0.9, 2)
    fig = whatif.heatmap(cells, "in-run")
    assert fig.data[0].z.shape == (2, 2) and fig.layout.xaxis.title.text.startswith("cap K")
    assert "greedy" in whatif.sentence(cells.iloc[:0], 0.78, 3)
