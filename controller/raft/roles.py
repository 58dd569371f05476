"""Roles and the one table of allowed role transitions.

Every `become_*` method of `RaftNode` asserts against `ALLOWED_TRANSITIONS`
before it changes anything, so an illegal transition is a loud bug, not a
quietly inconsistent node.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType


class Role(enum.Enum):
    # Follows the leader of its epoch, or waits for one (leader unknown: KRaft's
    # "unattached"/"voted" states). Observers are always followers.
    FOLLOWER = "follower"
    # Pre-vote round (thesis §9.6): asks voters whether they *would* vote for it in
    # epoch + 1 without changing anyone's epoch, so a node that was cut off cannot
    # disturb a healthy quorum when it comes back.
    PROSPECTIVE = "prospective"
    # Real election in a new epoch it bumped and voted itself in.
    CANDIDATE = "candidate"
    LEADER = "leader"
    # A leader that gave up its epoch (shutdown, or lost the quorum): it accepts no
    # writes and moves no high watermark, but keeps the epoch until a new one starts.
    RESIGNED = "resigned"


ALLOWED_TRANSITIONS: Mapping[Role, frozenset[Role]] = MappingProxyType(
    {
        # FOLLOWER -> FOLLOWER: a new epoch or a newly learnt leader.
        Role.FOLLOWER: frozenset({Role.FOLLOWER, Role.PROSPECTIVE}),
        # PROSPECTIVE -> PROSPECTIVE: the pre-vote round timed out, start another.
        Role.PROSPECTIVE: frozenset({Role.PROSPECTIVE, Role.CANDIDATE, Role.FOLLOWER}),
        # A candidate whose election times out goes back to pre-vote rather than
        # bumping the epoch again: a split vote must not drive epochs up for ever.
        Role.CANDIDATE: frozenset({Role.PROSPECTIVE, Role.LEADER, Role.FOLLOWER}),
        Role.LEADER: frozenset({Role.RESIGNED, Role.FOLLOWER}),
        Role.RESIGNED: frozenset({Role.PROSPECTIVE, Role.FOLLOWER}),
    }
)

# Roles an observer may move to: it follows; a leader that removed itself from the
# voters resigns once the change commits (thesis §4.2.2), and may lead until then.
OBSERVER_ROLES = frozenset({Role.FOLLOWER, Role.RESIGNED})


class IllegalTransitionError(AssertionError):
    """A role transition outside `ALLOWED_TRANSITIONS`: always a bug in the core."""


def check_transition(current: Role, target: Role, *, is_voter: bool) -> None:
    """Raise `IllegalTransitionError` unless `current -> target` is allowed."""
    if target not in ALLOWED_TRANSITIONS[current]:
        raise IllegalTransitionError(f"illegal role transition {current.name} -> {target.name}")
    if not is_voter and target not in OBSERVER_ROLES:
        raise IllegalTransitionError(f"an observer cannot become {target.name}")
