"""engine.interop.peer: the field checks every importer shares (one line naming record and field)."""

import math

import pytest

from engine.interop.peer import PeerError, as_count, count, counts, even_split, number


def test_even_split_sums_and_puts_the_larger_parts_first():
    assert even_split(10, 4) == [3, 3, 2, 2]
    assert sum(even_split(7, 3)) == 7 and even_split(5, 0) == []


def test_counts_take_integral_floats_and_refuse_the_rest():
    assert as_count(28.0, "n", "r1") == 28
    for bad, msg in ((True, "expected a count"), (2.5, "whole count"), (math.nan, "whole count"), (-1, "outside")):
        with pytest.raises(PeerError, match=msg):
            as_count(bad, "n", "r1")
    with pytest.raises(PeerError, match=r"^r7: field 'm.k': "):
        count({"k": "x"}, "k", "r7", prefix="m.")
    assert count({}, "k", "r7", optional=True) is None


def test_numbers_and_lists():
    assert number({"t": 1.5}, "t", "r") == 1.5
    with pytest.raises(PeerError, match="finite number"):
        number({"t": math.inf}, "t", "r")
    assert counts({"a": [1, 2.0]}, "a", "r") == [1, 2]
    with pytest.raises(PeerError, match=r"field 'a\[1\]'"):
        counts({"a": [1, -2]}, "a", "r")
    with pytest.raises(PeerError, match="exceeds the limit"):
        counts({"a": [0] * 5}, "a", "r", max_len=4)
