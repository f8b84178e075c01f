"""The pure helpers of benchmarks/playground.py: medians, rates, the tokens-fed summary and the table's cells."""

from __future__ import annotations

import pytest

from playground import fed_summary, median, per_second, speed_cell


def test_median_of_odd_and_even_counts():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5


def test_median_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="no values"):
        median([])


def test_per_second_counts_tokens_per_second():
    assert per_second(120, 100.0) == pytest.approx(1200.0)
    assert per_second(60, 1000.0) == pytest.approx(60.0)


def test_per_second_refuses_a_time_that_is_not_positive():
    with pytest.raises(ValueError, match="positive"):
        per_second(10, 0.0)


def test_fed_summary_tells_a_cache_from_the_whole_text():
    assert fed_summary([8] + [1] * 119) == "8, then 1"
    assert fed_summary(list(range(8, 128))) == "8, 9, ..., 127"
    assert fed_summary([8]) == "8"


def test_speed_cell_has_one_width_with_and_without_a_time():
    cell, blank = speed_cell(100.0, 120), speed_cell(None, 120)
    assert cell == "  100 ms  1200 tok/s"
    assert len(cell) == len(blank) == 20
    assert blank.strip() == "-"
