"""One controller as a quorum member: its own state (DescribeNode, `metakraft
endpoint status`) and the hand-over of leadership to another voter
(TransferLeadership, `metakraft quorum transfer-leadership`).

Both read the Raft driver's status (`QuorumPort.status()`); neither goes through the
controller's queue except the transfer's start, which must run on the node task.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

from controller import __version__
from controller.api.seam import NodeDescription, TransferOutcome
from controller.metadata import ApiError, ErrorCode
from controller.metadata.features import METADATA_VERSION
from controller.metadata.levels import LATEST_METADATA_VERSION, MINIMUM_METADATA_VERSION
from controller.quorum.contracts import DriverStatus
from controller.quorum_controller.controller import QuorumController
from controller.quorum_controller.ports import QuorumPort
from controller.raft.ready import TransferError

# How often the transfer's waiter looks at the driver's status. A hand-over takes an
# election round trip (tens of ms on one host); 20 ms adds little to it.
_TRANSFER_POLL_S = 0.02
# The longest a caller may ask a transfer to be waited for.
MAX_TRANSFER_WAIT_MS = 60_000
# Started: for the uptime DescribeNode reports.
_STARTED_S = time.monotonic()


def data_dir_bytes(directory: Path | None) -> int:
    """Bytes of the files under `directory` (-1: no directory)."""
    if directory is None:
        return -1
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            # A segment may be deleted (retention) while we walk.
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def describe_node(controller: QuorumController, status: DriverStatus,
                  data_dir: Path | None) -> NodeDescription:
    """This controller's state; run on the node task (a stale read), so the finalized
    level is that of the committed state."""
    settings = controller.settings
    return NodeDescription(
        node_id=status.node_id,
        directory_id=status.directory_id,
        endpoint=settings.listen_address or settings.voter_addresses.get(status.node_id, ""),
        cluster_id=settings.cluster_id,
        role=status.role,
        controller_mode=controller.mode.value,
        leader_id=-1 if status.leader_id is None else status.leader_id,
        leader_epoch=status.epoch,
        high_watermark=status.high_watermark,
        log_start_offset=status.log_start_offset,
        log_end_offset=status.end_offset,
        flushed_offset=status.flushed_offset,
        applied_offset=status.applied_offset,
        data_dir_bytes=data_dir_bytes(data_dir),
        software_version=__version__,
        min_supported_version=MINIMUM_METADATA_VERSION,
        max_supported_version=LATEST_METADATA_VERSION,
        finalized_metadata_version=controller.state.features.finalized_level(METADATA_VERSION),
        voter=status.node_id in status.voters.ids if status.voters.ids
        else status.node_id in settings.voter_addresses,
        repair_to_offset=-1 if status.repair_to_offset is None else status.repair_to_offset,
        uptime_ms=int((time.monotonic() - _STARTED_S) * 1000),
        transfer_target=-1 if status.transfer_target is None else status.transfer_target,
    )


_REFUSALS = {
    TransferError.NOT_VOTER: ErrorCode.VOTER_NOT_FOUND,
    TransferError.IN_PROGRESS: ErrorCode.CONTROLLER_BUSY,
    TransferError.CHANGE_PENDING: ErrorCode.CONTROLLER_BUSY,
}


async def transfer_leadership(controller: QuorumController, quorum: QuorumPort, target: int,
                              timeout_ms: int) -> TransferOutcome:
    """Hand leadership to voter `target` and wait (up to `timeout_ms`) until it leads.
    Raises `NotControllerError` unless this is the active controller."""
    before = quorum.status()
    if target == before.node_id and before.role == "leader":
        return TransferOutcome(ApiError(ErrorCode.NONE), before.node_id, before.epoch)
    error = await controller.transfer_leadership(target)
    if error is TransferError.NOT_LEADER:
        raise controller.machine.not_controller()
    if error is not None:
        message = {
            TransferError.NOT_VOTER: f"controller {target} is not a voter "
                                     f"({before.voters.describe() or 'static quorum'})",
            TransferError.IN_PROGRESS: "another leadership transfer is under way; retry",
            TransferError.CHANGE_PENDING: "a voter change is not committed yet; retry",
        }[error]
        return TransferOutcome(ApiError(_REFUSALS[error], message), before.node_id, before.epoch)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1e3
    while True:
        now = quorum.status()
        if now.transfer_target is None and now.role == "leader":
            return TransferOutcome(ApiError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"controller {target} did not catch up with the log in time; controller "
                f"{now.node_id} leads on (epoch {now.epoch}) and nothing was lost: retry"),
                now.node_id, now.epoch)
        if now.epoch > before.epoch and now.leader_id is not None:
            if now.leader_id == target:
                return TransferOutcome(ApiError(ErrorCode.NONE), target, now.epoch)
            return TransferOutcome(ApiError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"controller {now.leader_id} took over in epoch {now.epoch}, not {target} "
                "(it may have stopped meanwhile)"), now.leader_id, now.epoch)
        if loop.time() >= deadline:
            return TransferOutcome(ApiError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"no new leader within {timeout_ms} ms; check `metakraft quorum describe`"),
                -1, now.epoch)
        await asyncio.sleep(_TRANSFER_POLL_S)
