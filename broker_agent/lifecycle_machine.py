"""The broker's lifecycle as a state machine, without I/O: what to send next
(register, heartbeat, or stop), how long to wait, and the state the status RPC
reports. `BrokerLifecycle` (lifecycle.py) is its asyncio + gRPC driver; the
whole-system simulation drives the same machine.

    STARTING ─registered─▶ CATCHING_UP ─caught up + unfenced─▶ RUNNING
                              ▲                 │ fenced (missed session)
                              └── re-register ◀─┴─▶ FENCED ─unfenced─▶ RUNNING
    any ─shutdown requested─▶ PENDING_CONTROLLED_SHUTDOWN ─should_shut_down or
                                                            timeout─▶ SHUTTING_DOWN

A "stale broker epoch" (or "not registered") answer means the controller lost or
replaced our registration: register again, same incarnation, state unchanged.
States change only through `LIFECYCLE_TRANSITIONS`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs

from controller.backoff import Backoff
from controller.log import get_logger

log = get_logger("metakraft.broker")

BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 1.0
# Heartbeat answers meaning "your registration is gone or replaced": register again.
REREGISTER_CODES = frozenset({"STALE_BROKER_EPOCH", "BROKER_ID_NOT_REGISTERED"})


class LifecycleState(enum.Enum):
    STARTING = 1
    CATCHING_UP = 2
    FENCED = 3
    RUNNING = 4
    PENDING_CONTROLLED_SHUTDOWN = 5
    SHUTTING_DOWN = 6


_S = LifecycleState
_STOPPING = frozenset({_S.PENDING_CONTROLLED_SHUTDOWN, _S.SHUTTING_DOWN})
# Every state change the broker may make (a state may also stay as it is).
LIFECYCLE_TRANSITIONS: dict[LifecycleState, frozenset[LifecycleState]] = {
    _S.STARTING: frozenset({_S.CATCHING_UP}) | _STOPPING,
    _S.CATCHING_UP: frozenset({_S.RUNNING, _S.FENCED}) | _STOPPING,
    _S.FENCED: frozenset({_S.RUNNING, _S.CATCHING_UP}) | _STOPPING,
    _S.RUNNING: frozenset({_S.FENCED, _S.CATCHING_UP}) | _STOPPING,
    _S.PENDING_CONTROLLED_SHUTDOWN: frozenset({_S.SHUTTING_DOWN}),
    _S.SHUTTING_DOWN: frozenset(),
}


class Action(enum.Enum):
    REGISTER = "register"
    HEARTBEAT = "heartbeat"
    STOP = "stop"


@attrs.frozen
class HeartbeatFlags:
    """What the next heartbeat asks for."""

    want_fence: bool
    want_shutdown: bool


class LifecycleMachine:
    def __init__(self, broker_id: int, *, heartbeat_interval_s: float,
                 shutdown_timeout_s: float, jitter: Callable[[], float]) -> None:
        assert heartbeat_interval_s > 0 and shutdown_timeout_s > 0
        self.broker_id = broker_id
        self.heartbeat_interval_s = heartbeat_interval_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self.state = LifecycleState.STARTING
        # -1: not registered (register next).
        self.broker_epoch = -1
        self.shutdown_deadline_s: float | None = None
        # `jitter` (a float in [0, 1) per call) spreads the retries of brokers that
        # lost the controllers together.
        self._backoff = Backoff(BACKOFF_FIRST_S, BACKOFF_MAX_S, jitter)
        # How long to wait before the next action.
        self.wait_s = 0.0
        # Told each new state (the daemon's per-role health status follows it).
        self.state_listeners: list[Callable[[LifecycleState], None]] = []

    def _become(self, state: LifecycleState) -> None:
        if state is self.state:
            return
        assert state in LIFECYCLE_TRANSITIONS[self.state], (self.state, state)
        self.state = state
        for listener in self.state_listeners:
            listener(state)

    # ------------------------------------------------------------------ stimuli

    def shutdown_requested(self, now_s: float) -> None:
        if self.shutdown_deadline_s is None:
            log.info("controlled_shutdown_requested", broker=self.broker_id)
            self.shutdown_deadline_s = now_s + self.shutdown_timeout_s

    def next_action(self, now_s: float) -> Action:
        """What to do now: register, heartbeat, or stop (the lifecycle is over)."""
        if self.state is LifecycleState.SHUTTING_DOWN:
            return Action.STOP
        if self.shutdown_deadline_s is not None:
            if self.broker_epoch < 0 or now_s >= self.shutdown_deadline_s:
                if self.broker_epoch >= 0:
                    log.warning("controlled_shutdown_timeout", broker=self.broker_id)
                self._become(LifecycleState.SHUTTING_DOWN)
                return Action.STOP
            self._become(LifecycleState.PENDING_CONTROLLED_SHUTDOWN)
        return Action.REGISTER if self.broker_epoch < 0 else Action.HEARTBEAT

    def heartbeat_flags(self, caught_up: bool) -> HeartbeatFlags:
        shutting = self.shutdown_deadline_s is not None
        return HeartbeatFlags(want_fence=not caught_up and not shutting,
                              want_shutdown=shutting)

    def registered(self, error_code: str, broker_epoch: int) -> None:
        """The answer to a RegisterBroker."""
        if error_code not in ("", "NONE"):
            log.warning("register_refused", broker=self.broker_id, code=error_code)
            self.unreachable()
            return
        self.broker_epoch = broker_epoch
        if self.state is LifecycleState.STARTING:
            self._become(LifecycleState.CATCHING_UP)
        self._answered()

    def heartbeat_answered(self, error_code: str, *, is_fenced: bool, should_shut_down: bool,
                           caught_up: bool, applied_offset: int) -> None:
        """The answer to a BrokerHeartbeat sent with `heartbeat_flags(caught_up)`."""
        if error_code in REREGISTER_CODES:
            log.warning("reregister", broker=self.broker_id, code=error_code)
            self.broker_epoch = -1
            self._answered()
            return
        if error_code not in ("", "NONE"):
            log.warning("heartbeat_error", broker=self.broker_id, code=error_code)
            self.unreachable()
            return
        self._answered()
        if self.shutdown_deadline_s is not None:
            if should_shut_down:
                log.info("controlled_shutdown_complete", broker=self.broker_id)
                self._become(LifecycleState.SHUTTING_DOWN)
                self.wait_s = 0.0  # nothing left to wait for
            return
        previous = self.state
        if not caught_up:
            self._become(LifecycleState.CATCHING_UP)
        elif is_fenced:
            self._become(LifecycleState.FENCED)
        else:
            self._become(LifecycleState.RUNNING)
        if self.state is not previous:
            log.info("state_change", broker=self.broker_id, previous=previous.name,
                     state=self.state.name, epoch=self.broker_epoch, offset=applied_offset)

    def stopped(self) -> None:
        """The driver stops (the lifecycle finished, or it was cancelled)."""
        self._become(LifecycleState.SHUTTING_DOWN)

    def unreachable(self) -> None:
        """No controller answered (or it refused): back off, then try again."""
        self.wait_s = self._backoff.next_delay()

    def _answered(self) -> None:
        self._backoff.reset()
        self.wait_s = self.heartbeat_interval_s
