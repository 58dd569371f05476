"""The broker lifecycle machine on its own: no event loop, no clock, no network."""

from __future__ import annotations

import pytest

from broker_agent.lifecycle_machine import (
    BACKOFF_FIRST_S,
    BACKOFF_MAX_S,
    LIFECYCLE_TRANSITIONS,
    Action,
    LifecycleMachine,
    LifecycleState,
)

S = LifecycleState


def machine() -> LifecycleMachine:
    # No jitter: each wait is exactly half its backoff step (test_backoff.py covers it).
    return LifecycleMachine(1, heartbeat_interval_s=0.5, shutdown_timeout_s=5.0,
                            jitter=lambda: 0.0)


def beat(m: LifecycleMachine, *, caught_up: bool = True, fenced: bool = False,
         code: str = "NONE", shut: bool = False) -> None:
    assert m.next_action(0.0) is Action.HEARTBEAT
    m.heartbeat_answered(code, is_fenced=fenced, should_shut_down=shut, caught_up=caught_up,
                         applied_offset=10)


def test_register_catch_up_run_fence_and_recover() -> None:
    m = machine()
    assert m.next_action(0.0) is Action.REGISTER and m.state is S.STARTING
    m.registered("NONE", 42)
    assert (m.state, m.broker_epoch, m.wait_s) == (S.CATCHING_UP, 42, 0.5)
    assert m.heartbeat_flags(caught_up=False).want_fence
    beat(m, caught_up=False, fenced=True)
    assert m.state is S.CATCHING_UP
    beat(m)
    assert m.state is S.RUNNING
    beat(m, fenced=True)  # missed its session
    assert m.state is S.FENCED
    beat(m)
    assert m.state is S.RUNNING


def test_a_stale_epoch_registers_again_with_the_state_kept() -> None:
    m = machine()
    m.registered("NONE", 42)
    beat(m)
    beat(m, code="STALE_BROKER_EPOCH")
    assert m.broker_epoch == -1 and m.state is S.RUNNING
    assert m.next_action(0.0) is Action.REGISTER


def test_no_controller_backs_off_exponentially_up_to_a_bound() -> None:
    m = machine()
    waits = []
    for _ in range(8):
        m.unreachable()
        waits.append(m.wait_s)
    assert waits[0] == BACKOFF_FIRST_S / 2 and waits[1] == BACKOFF_FIRST_S
    assert max(waits) == BACKOFF_MAX_S / 2 == waits[-1]
    m.registered("NONE", 1)
    assert m.wait_s == 0.5  # an answer resets the backoff
    m.unreachable()
    assert m.wait_s == BACKOFF_FIRST_S / 2


def test_controlled_shutdown_completes_when_the_controller_agrees() -> None:
    m = machine()
    m.registered("NONE", 42)
    beat(m)
    m.shutdown_requested(100.0)
    assert m.heartbeat_flags(caught_up=True).want_shutdown
    assert m.next_action(100.0) is Action.HEARTBEAT
    assert m.state is S.PENDING_CONTROLLED_SHUTDOWN
    m.heartbeat_answered("NONE", is_fenced=False, should_shut_down=False, caught_up=True,
                         applied_offset=10)
    assert m.state is S.PENDING_CONTROLLED_SHUTDOWN
    m.heartbeat_answered("NONE", is_fenced=False, should_shut_down=True, caught_up=True,
                         applied_offset=10)
    assert (m.state, m.wait_s) == (S.SHUTTING_DOWN, 0.0)
    assert m.next_action(100.5) is Action.STOP


def test_controlled_shutdown_gives_up_at_its_deadline_or_at_once_if_unregistered() -> None:
    m = machine()
    m.registered("NONE", 42)
    m.shutdown_requested(100.0)
    assert m.next_action(104.9) is Action.HEARTBEAT
    assert m.next_action(105.0) is Action.STOP and m.state is S.SHUTTING_DOWN
    fresh = machine()
    fresh.shutdown_requested(0.0)
    assert fresh.next_action(0.0) is Action.STOP


def test_states_change_only_through_the_table() -> None:
    assert LIFECYCLE_TRANSITIONS[S.SHUTTING_DOWN] == frozenset()
    assert S.RUNNING not in LIFECYCLE_TRANSITIONS[S.STARTING]
    m = machine()
    with pytest.raises(AssertionError):
        m._become(S.RUNNING)  # STARTING -> RUNNING skips registration
