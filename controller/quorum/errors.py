"""What appending to the Raft node can raise (`NodeAccess.append`): plain values, so
the controller's state machine can handle them without importing the driver."""

from __future__ import annotations

from controller.raft.ready import ProposeError


class NotLeaderError(Exception):
    def __init__(self, leader_id: int | None, epoch: int) -> None:
        super().__init__(f"not the leader (leader: {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class ProposalRejectedError(ValueError):
    """The core refused the proposal (empty, or too large)."""


class LeadershipTransferringError(ProposalRejectedError):
    """The leader is handing over to another voter and appends nothing meanwhile;
    nothing was appended: retry on the next leader."""


def proposal_refused(error: ProposeError) -> ProposalRejectedError:
    """The exception for a proposal the core refused (other than NOT_LEADER)."""
    if error is ProposeError.TRANSFERRING:
        return LeadershipTransferringError("leadership is being transferred; retry on the "
                                           "next leader")
    return ProposalRejectedError(f"proposal refused: {error.value}")
