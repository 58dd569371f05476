"""GcPolicy: full passes freeze their survivors; a thaw every interval reclaims the
cycles that died frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from controller.gc_policy import GcPolicy


class Cycle:
    def __init__(self) -> None:
        self.me = self


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def policy() -> Iterator[tuple[GcPolicy, Clock]]:
    clock = Clock()
    gc.collect()
    gc.unfreeze()
    policy = GcPolicy(thaw_interval_s=60.0, clock_s=clock)
    policy.install()
    try:
        yield policy, clock
    finally:
        policy.uninstall()
        assert gc.get_freeze_count() == 0


def test_a_full_pass_freezes_its_survivors_and_the_next_walks_only_newer_objects(
        policy: tuple[GcPolicy, Clock]) -> None:
    gc_policy, _clock = policy
    image = [[i] for i in range(50_000)]  # long-lived, tracked (lists always are)
    gc.collect()
    assert gc_policy.freezes == 1
    assert gc.get_freeze_count() >= len(image)
    # Younger passes leave the frozen objects alone; so does the next full pass.
    gc.collect(0)
    assert gc_policy.freezes == 1
    frozen = gc.get_freeze_count()
    gc.collect()
    assert gc_policy.freezes == 2 and gc.get_freeze_count() >= frozen
    assert gc_policy.thaws == 0
    del image


def test_a_cycle_that_dies_frozen_is_reclaimed_at_the_next_thaw(
        policy: tuple[GcPolicy, Clock]) -> None:
    gc_policy, clock = policy
    cycle = Cycle()
    alive = weakref.ref(cycle)
    gc.collect()  # the cycle survives this pass: frozen
    del cycle
    gc.collect()
    # Reference counting cannot free a cycle, and the frozen heap is not walked.
    assert alive() is not None
    clock.now_s += 59.0
    gc.collect()
    assert alive() is not None and gc_policy.thaws == 0
    clock.now_s += 1.0
    gc.collect()  # the thaw pass walks everything
    assert alive() is None
    assert gc_policy.thaws == 1
    # ...and freezes its survivors again.
    assert gc.get_freeze_count() > 0


def test_acyclic_objects_are_freed_frozen_or_not(policy: tuple[GcPolicy, Clock]) -> None:
    gc_policy, _clock = policy

    class Leaf:
        pass

    leaf = Leaf()
    alive = weakref.ref(leaf)
    gc.collect()
    assert gc_policy.freezes == 1 and alive() is not None
    del leaf  # reference counting frees it at once, frozen or not
    assert alive() is None
