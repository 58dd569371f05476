"""Repairing a damaged log ("protocol-aware recovery"): when may a replica whose
disk lost records it had flushed vote again?

Raft's election restriction (§5.4.1) assumes a voter's log still holds every
record it acknowledged: the majority that stored a committed record overlaps
every electing majority, and the overlapping voter refuses candidates that lack
the record. A replica that lost acknowledged records (a flipped byte, deleted
segments; storage finds it on open with the recovery point) breaks that: it
could elect a leader without them, and the record is gone for good. So until
it holds them again it neither grants votes (pre-votes included) nor campaigns.
Its fetch offset still counts toward the leader's high watermark: it fetches
from what it really holds, durably.

When does it hold them again? Any leader elected while it abstained was
elected by a majority without it, which overlaps every majority that stored a
committed record in an intact voter, so the leader holds every committed
record (and so does one elected before the damage). Its high watermark covers
all of them once it has committed a record of its own epoch (§5.4.2): every
earlier record comes before that one. The repair is done when the replica has
flushed its log up to `max(recovery point, such a high watermark)`: the
recovery point because acknowledgements it gave before the crash may have been
counted in a high watermark the leader has not passed on yet. The simulation
checks the rule (tests/simulation: disk damage below the recovery point).
"""

from __future__ import annotations

import attrs


@attrs.define(slots=True)
class LogRepair:
    """Invariant: `target` is None until set once, then >= `recovery_point`."""

    # The log had been flushed up to here before the damage.
    recovery_point: int
    # What the repaired log must hold: set from the first high watermark of a
    # leader that committed in its own epoch.
    target: int | None = None

    def note_leader_high_watermark(self, high_watermark: int) -> None:
        if self.target is None:
            self.target = max(self.recovery_point, high_watermark)

    def done(self, flushed_offset: int) -> bool:
        return self.target is not None and flushed_offset >= self.target
