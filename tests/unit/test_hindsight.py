"""Window analysis: reference runs, the exact simulator (checked against real decode runs), the cost
model and closed forms (checked against the project notes' tables), the tables and the CLI."""
from engine.hindsight import accept_runs


# ------------------------------------------------------------------ reference run


def test_accept_runs():
    assert accept_runs([1, 1, 0, 1, 0, 0, 1, 1, 1]) == [2, 1, 0, 1, 0, 0, 3, 2, 1]
    assert accept_runs([]) == []
