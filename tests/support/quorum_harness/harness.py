"""TEST HARNESS ONLY: the `QuorumHarness` gRPC service (harness.proto) over a
`RaftDriver`, so tests and the benchmark can drive a bare quorum from outside.

Not the controller's API (the Admin service is) and unauthenticated: loopback only.
"""

from __future__ import annotations

import grpc
from grpc import aio

from controller.logformat import BatchOrigin
from controller.quorum.driver import (
    NotLeaderError,
    ProposalLostError,
    ProposalRejectedError,
    RaftDriver,
)
from controller.quorum.service import DriverStoppedError, QueueFullError
from tests.support.quorum_harness import harness_pb2 as pb
from tests.support.quorum_harness import harness_pb2_grpc as pb_grpc

MAX_READ_BYTES = 4 * 1024 * 1024
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["QuorumHarness"].full_name


class QuorumHarnessService(pb_grpc.QuorumHarnessServicer):
    def __init__(self, driver: RaftDriver) -> None:
        self._driver = driver

    async def Propose(self, request: pb.ProposeRequest,
                      context: pb_grpc._ServicerContext) -> pb.ProposeResponse:
        origin = BatchOrigin("quorum-harness", context.peer(), request.request_id)
        try:
            last = await self._driver.propose(list(request.records), origin)
        except NotLeaderError as exc:
            return pb.ProposeResponse(error="not leader", leader_id=exc.leader_id,
                                      epoch=exc.epoch)
        except (ProposalRejectedError, ProposalLostError, QueueFullError) as exc:
            return pb.ProposeResponse(error=str(exc))
        except TimeoutError:
            return pb.ProposeResponse(error="timeout: outcome unknown")
        except DriverStoppedError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        status = self._driver.status()
        return pb.ProposeResponse(epoch=status.epoch,
                                  base_offset=last - len(request.records) + 1,
                                  last_offset=last)

    async def Status(self, request: pb.StatusRequest,
                     context: pb_grpc._ServicerContext) -> pb.StatusResponse:
        s = self._driver.status()
        return pb.StatusResponse(node_id=s.node_id, role=s.role, epoch=s.epoch,
                                 leader_id=s.leader_id, high_watermark=s.high_watermark,
                                 end_offset=s.end_offset, flushed_offset=s.flushed_offset,
                                 log_start_offset=s.log_start_offset,
                                 applied_offset=s.applied_offset)

    async def ReadLog(self, request: pb.ReadLogRequest,
                      context: pb_grpc._ServicerContext) -> pb.ReadLogResponse:
        s = self._driver.status()
        if not s.log_start_offset <= request.from_offset <= s.end_offset:
            await context.abort(grpc.StatusCode.OUT_OF_RANGE,
                                f"from_offset {request.from_offset} outside "
                                f"[{s.log_start_offset}, {s.end_offset}]")
        max_bytes = min(max(request.max_bytes, 1), MAX_READ_BYTES)
        try:
            batches = self._driver.read_log(request.from_offset, max_bytes)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.ReadLogResponse(batches=batches, end_offset=s.end_offset,
                                  high_watermark=s.high_watermark)


def add_harness_service(server: aio.Server, driver: RaftDriver) -> str:
    pb_grpc.add_QuorumHarnessServicer_to_server(QuorumHarnessService(driver), server)
    return SERVICE_NAME
