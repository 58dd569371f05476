"""Follower side: one `ReplicaFetcher` per leader broker, replicating every partition
this broker follows from it through one fetch session (sessions.py).

Each turn: send the positions that moved (all of them in a new session), take the
answer, append each partition's batches (the log verifies every one), truncate a
diverged partition to what it shares with the leader, fsync what was appended
(the manager's group commit), and only then report the new positions: a
follower's fetch offset, which the leader's high watermark is computed from,
covers only records this follower has made durable.
"""

from __future__ import annotations

import asyncio
import random
from typing import Protocol

import grpc

from broker_agent.image import MetadataImage, PartitionKey
from broker_agent.replica import data_pb2 as dpb
from broker_agent.replica import data_pb2_grpc as dpb_grpc
from broker_agent.replica.config import DataPlaneConfig
from broker_agent.replica.partition import Diverged, PartitionReplica, Role
from controller import rpc
from controller.backoff import Backoff
from controller.log import get_logger
from controller.logformat.errors import StorageError
from controller.rpc import RpcLimits
from controller.security.tls import TlsCredentials


class FetcherHost(Protocol):
    """What the fetchers use of the replica manager (a seam: no import back)."""

    broker_id: int
    image: MetadataImage
    partitions: dict[PartitionKey, PartitionReplica]
    config: DataPlaneConfig
    limits: RpcLimits
    tls: TlsCredentials | None

    def broker_epoch(self) -> int: ...

    async def flush(self, keys: set[PartitionKey]) -> None: ...

log = get_logger("metakraft.broker.data")

# A fetch waits at the leader up to the configured wait; the call may take this much
# longer before the follower gives up on it and reconnects.
_CALL_SLACK_S = 10.0


class ReplicaFetcher:
    def __init__(self, manager: FetcherHost, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.keys: set[PartitionKey] = set()
        # Keys whose position the leader has not been told yet.
        self.changed: set[PartitionKey] = set()
        self.wake = asyncio.Event()
        self.task = asyncio.create_task(self._run(), name=f"replica-fetcher-{leader_id}")
        self.fetches = 0

    def add(self, key: PartitionKey) -> None:
        self.keys.add(key)
        self.changed.add(key)
        self.wake.set()

    def remove(self, key: PartitionKey) -> None:
        self.keys.discard(key)
        self.changed.discard(key)

    async def _run(self) -> None:
        backoff = Backoff(0.1, 2.0, random.random)
        while True:
            address = self._address()
            if not address:
                await asyncio.sleep(0.2)
                continue
            channel = rpc.create_channel(address, self.manager.limits, self.manager.tls)
            try:
                stub = dpb_grpc.PartitionDataStub(channel)
                await self._session(address, stub, backoff)
            except (grpc.RpcError, TimeoutError) as exc:
                log.info("replica_fetch_failed", leader=self.leader_id, address=address,
                         error=str(exc).splitlines()[0][:200])
                await asyncio.sleep(backoff.next_delay())
            except Exception:
                # A bug must not stop replication silently: said loudly, then retried.
                log.critical("replica_fetcher_crashed", leader=self.leader_id, exc_info=True)
                await asyncio.sleep(backoff.next_delay())
            finally:
                await channel.close()

    def _address(self) -> str:
        return self.manager.image.replication_address(self.leader_id)

    def _position(self, key: PartitionKey) -> dpb.FetchPartition | None:
        replica = self.manager.partitions.get(key)
        if replica is None or replica.role is not Role.FOLLOWER:
            return None
        return dpb.FetchPartition(topic_id=key[0], partition=key[1],
                                  fetch_offset=replica.log_end_offset,
                                  last_fetched_epoch=replica.last_epoch,
                                  current_leader_epoch=replica.leader_epoch)

    async def _session(self, address: str, stub: dpb_grpc.PartitionDataStub,
                       backoff: Backoff) -> None:
        session_id, epoch = 0, 0
        sent: set[PartitionKey] = set()
        wait_ms = self.manager.config.replica_fetch_wait_ms
        while self._address() == address:
            if not self.keys and not sent:
                self.wake.clear()
                await self.wake.wait()
                continue
            if session_id == 0:
                send = set(self.keys)
                forgotten: set[PartitionKey] = set()
            else:
                send = self.changed & self.keys
                forgotten = sent - self.keys
            self.changed -= send
            positions = [p for p in map(self._position, sorted(send)) if p is not None]
            request = dpb.FetchRequest(
                replica_id=self.manager.broker_id,
                replica_broker_epoch=self.manager.broker_epoch(), partitions=positions,
                forgotten=[dpb.FetchPartition(topic_id=k[0], partition=k[1])
                           for k in sorted(forgotten)],
                max_wait_ms=wait_ms, session_id=session_id, session_epoch=epoch)
            try:
                # An aio channel: the stub's calls return awaitables.
                response: dpb.FetchResponse = await stub.Fetch(  # type: ignore[misc]
                    request, timeout=wait_ms / 1000 + _CALL_SLACK_S)
            except BaseException:
                self.changed |= send  # not known to have arrived
                raise
            self.fetches += 1
            backoff.reset()
            if response.error == dpb.FETCH_SESSION_NOT_FOUND:
                session_id, epoch, sent = 0, 0, set()
                continue
            session_id, epoch = response.session_id, epoch + 1
            sent = (sent | {(p.topic_id, p.partition) for p in positions}) - forgotten
            await self._take(response)

    async def _take(self, response: dpb.FetchResponse) -> None:
        appended: set[PartitionKey] = set()
        for answer in response.partitions:
            key = (answer.topic_id, answer.partition)
            replica = self.manager.partitions.get(key)
            if replica is None or key not in self.keys or replica.role is not Role.FOLLOWER:
                continue
            try:
                if answer.error:
                    self._on_error(key, answer)
                elif answer.HasField("diverging_epoch"):
                    end = replica.truncate_for_divergence(
                        Diverged(answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset))
                    log.warning("replica_truncated", partition=replica.name, leader=self.leader_id,
                                leader_epoch=replica.leader_epoch, log_end_offset=end,
                                reason="diverged from the leader's log")
                    self.changed.add(key)
                else:
                    if replica.append_as_follower(answer.records, answer.high_watermark):
                        appended.add(key)
                        self.changed.add(key)
            except StorageError as exc:
                log.warning("replica_append_refused", partition=replica.name,
                            leader=self.leader_id, error=str(exc))
                self.changed.add(key)
        await self.manager.flush(appended)

    def _on_error(self, key: PartitionKey, answer: dpb.FetchedPartition) -> None:
        replica = self.manager.partitions[key]
        if answer.error == dpb.OFFSET_OUT_OF_RANGE:
            if answer.log_start_offset > replica.log_end_offset:
                # Retention at the leader passed our end: start over at its start.
                replica.reset_to(answer.log_start_offset)
            elif 0 <= answer.log_end_offset < replica.log_end_offset:
                replica.truncate_above(answer.log_end_offset)  # longer than the leader's
            self.changed.add(key)
            return
        log.debug("replica_fetch_refused", partition=replica.name, leader=self.leader_id,
                  error=dpb.DataError.Name(answer.error), message=answer.message)


class ReplicaFetchers:
    """The fetchers of one broker, by leader; a partition is in at most one."""

    def __init__(self, manager: FetcherHost) -> None:
        self.manager = manager
        self._by_leader: dict[int, ReplicaFetcher] = {}
        self._leader_of: dict[PartitionKey, int] = {}

    def follow(self, key: PartitionKey, leader_id: int) -> None:
        current = self._leader_of.get(key)
        if current is not None and current != leader_id:
            self.remove(key)
        if leader_id < 0 or leader_id == self.manager.broker_id:
            return
        fetcher = self._by_leader.get(leader_id)
        if fetcher is None:
            fetcher = self._by_leader[leader_id] = ReplicaFetcher(self.manager, leader_id)
        fetcher.add(key)
        self._leader_of[key] = leader_id

    def remove(self, key: PartitionKey) -> None:
        leader_id = self._leader_of.pop(key, None)
        if leader_id is not None:
            self._by_leader[leader_id].remove(key)

    def fetches(self) -> int:
        return sum(f.fetches for f in self._by_leader.values())

    async def stop_all(self) -> None:
        fetchers = list(self._by_leader.values())
        self._by_leader.clear()
        self._leader_of.clear()
        for fetcher in fetchers:
            fetcher.task.cancel()
        await asyncio.gather(*(f.task for f in fetchers), return_exceptions=True)
