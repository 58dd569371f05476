"""The one backoff: doubling steps up to a bound, each delay in [step/2, step)."""

from __future__ import annotations

import random

import pytest

from controller.backoff import Backoff


def test_steps_double_up_to_the_maximum_and_reset() -> None:
    lowest = Backoff(10, 80, lambda: 0.0)
    assert [lowest.next_delay() for _ in range(6)] == [5, 10, 20, 40, 40, 40]
    lowest.reset()
    assert lowest.next_delay() == 5


def test_delays_stay_inside_half_a_step_to_a_step() -> None:
    rng = random.Random(7)
    backoff = Backoff(10, 80, rng.random)
    step = 10.0
    for _ in range(50):
        delay = backoff.next_delay()
        assert step / 2 <= delay < step
        step = min(step * 2, 80)


def test_clients_failing_together_spread_out() -> None:
    # Two clients with their own randomness do not retry in lockstep.
    a, b = Backoff(100, 1000, random.Random(1).random), Backoff(100, 1000, random.Random(2).random)
    assert [a.next_delay() for _ in range(5)] != [b.next_delay() for _ in range(5)]


@pytest.mark.parametrize(("first", "maximum"), [(0, 10), (-1, 10), (20, 10)])
def test_bad_bounds_are_refused(first: float, maximum: float) -> None:
    with pytest.raises(ValueError, match="0 < first <= maximum"):
        Backoff(first, maximum, lambda: 0.0)


def test_jitter_outside_its_range_is_a_bug() -> None:
    with pytest.raises(AssertionError):
        Backoff(10, 80, lambda: 1.0).next_delay()
