"""What the core raises instead of returning work: events it cannot absorb."""

from __future__ import annotations


class CommittedHistoryCutError(Exception):
    """An observer's leader says the log differs below what the observer already
    knew committed (and handed to its state machine): committed records were lost
    upstream, e.g. on controllers whose disks failed past what the quorum tolerates.
    A voter never gets here (the election rules keep committed records; its core
    asserts). The node is unusable as it is; whoever runs it must drop its copy of
    the log and state and fetch the leader's again (the broker daemon does)."""

    def __init__(self, truncate_to: int, high_watermark: int, leader_id: int | None) -> None:
        super().__init__(
            f"leader {leader_id} has a different history below offset {high_watermark}, "
            f"which this node had applied: told to cut its log at {truncate_to}")
        self.truncate_to = truncate_to
        self.high_watermark = high_watermark
        self.leader_id = leader_id
