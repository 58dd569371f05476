"""The copier's bandwidth limit: a token bucket of one second, on a fake clock."""

from __future__ import annotations

from controller.tier.throttle import CopyThrottle


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_uploads_average_at_most_the_limit() -> None:
    clock = Clock()
    throttle = CopyThrottle(1000, clock)
    sent, waited = 0, 0.0
    for _ in range(50):  # 300-byte objects as fast as the throttle lets them
        wait = throttle.delay_s()
        clock.now_s += wait
        waited += wait
        throttle.took(300)
        sent += 300
    # The first second's bucket is free; after it, exactly the limit (the last
    # object's bytes are paid for before the next upload).
    assert abs(waited - (sent - 1000 - 300) / 1000) < 1e-9
    assert abs(throttle.delay_s() - 0.3) < 1e-9


def test_an_object_larger_than_a_second_passes_whole_and_is_paid_for_after() -> None:
    clock = Clock()
    throttle = CopyThrottle(1000, clock)
    assert throttle.delay_s() == 0
    throttle.took(5000)
    assert throttle.delay_s() == 4.0  # the 4000 bytes it overdrew
    clock.now_s += 4.0
    assert throttle.delay_s() == 0


def test_idle_time_does_not_bank_more_than_a_second() -> None:
    clock = Clock()
    throttle = CopyThrottle(1000, clock)
    clock.now_s += 3600
    throttle.took(1000)
    throttle.took(1000)
    assert throttle.delay_s() == 1.0
