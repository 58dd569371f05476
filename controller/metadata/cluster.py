"""Cluster manager: broker registrations (durable) and heartbeats (soft state).

Broker epoch. A broker's epoch is the offset of its RegisterBrokerRecord. The manager
cannot learn that offset at replay time in a form every reader agrees on (a snapshot
replays all its records at one offset), so the generated record *carries* the epoch and
replay takes it from the record: ``register_broker`` is given ``next_offset``, the
offset the first record of the batch it returns will get, and the registration record
is the last of that batch, so its epoch is ``next_offset + index``.

Lifecycle: registered fenced → unfenced at the first heartbeat that reports a metadata
offset at or past its registration offset → (optional) controlled shutdown, in which
the replication manager moves leaderships and ISR memberships away; the broker may
stop once it leads nothing → fenced when it misses heartbeats for the session timeout
→ unregistered, or replaced by a new incarnation (a new registration).

Heartbeat times live outside the timeline (soft state of the active controller only):
a controller that takes over calls ``activate(now_ms)`` so each broker gets a full
session before it can be fenced, and ``clear_soft_state()`` when it loses leadership.
Records that change partitions come from the replication manager through
``PartitionHooks`` (wired by ``MetadataState``), ordered so that at no offset is a
fenced or shutting-down broker a leader: partition changes before a fence/shutdown
record, after an unfence record.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import attrs

from controller.metadata.errors import (
    OK,
    ApiError,
    ControllerResult,
    ErrorCode,
    MetadataReplayError,
)
from controller.metadata.features import METADATA_VERSION, FeatureControlManager
from controller.metadata.levels import LATEST_METADATA_VERSION
from controller.records import (
    BrokerRegistrationChangeRecord,
    MetadataRecord,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
    make_record,
)
from controller.records import metadata_pb2 as pb
from controller.records.convert import broker_from_record, broker_to_record
from controller.records.domain import BrokerRegistration, FeatureRange, Listener
from timeline import SnapshotRegistry, TimelineHashMap


class PartitionHooks(Protocol):
    """What the cluster manager needs from the replication manager."""

    def leaving_brokers_changes(self, broker_ids: frozenset[int]) -> list[MetadataRecord]:
        """Changes taking ``broker_ids`` out of every ISR and leadership (fence,
        controlled shutdown, unregister, replacement), computed as if they were gone."""
        ...

    def ready_broker_changes(self, broker_id: int) -> list[MetadataRecord]:
        """Changes adding a usable broker back to the ISRs of its replicas and electing
        it where a partition has no leader, computed as if it were usable."""
        ...

    def leads_any(self, broker_id: int) -> bool: ...


@attrs.frozen
class BrokerRegistrationRequest:
    broker_id: int
    incarnation_id: str
    cluster_id: str
    listeners: tuple[Listener, ...] = ()
    rack: str | None = None
    features: tuple[FeatureRange, ...] = ()


# Bounds of a registration: a broker has a few listeners with short names.
MAX_LISTENERS = 64
MAX_NAME_CHARS = 255
MAX_BROKER_ID = 2**31 - 1


def registration_problem(request: BrokerRegistrationRequest,
                         controller_ids: frozenset[int]) -> str | None:
    """What makes a registration invalid, or None (checked before anything else)."""
    bid = request.broker_id
    if not 0 <= bid <= MAX_BROKER_ID:
        return f"broker id must be in [0, {MAX_BROKER_ID}], got {bid}"
    if bid in controller_ids:
        return (f"broker id {bid} is a controller's node id (controllers: "
                f"{sorted(controller_ids)}); give the broker an id of its own")
    if not request.incarnation_id or len(request.incarnation_id) > MAX_NAME_CHARS:
        return f"the incarnation id must have 1 to {MAX_NAME_CHARS} characters"
    if not 1 <= len(request.listeners) <= MAX_LISTENERS:
        return (f"a broker needs 1 to {MAX_LISTENERS} listeners (where it can be reached), "
                f"got {len(request.listeners)}")
    names = [li.name for li in request.listeners]
    if len(set(names)) != len(names):
        return f"listener names must be unique, got {names[:MAX_LISTENERS]}"
    for li in request.listeners:
        for field, value, least in (("name", li.name, 1), ("host", li.host, 1),
                                    ("security protocol", li.security_protocol, 0)):
            if not least <= len(value) <= MAX_NAME_CHARS:
                return (f"listener {li.name[:40]!r}: {field} must have {least} to "
                        f"{MAX_NAME_CHARS} characters, got {len(value)}")
        if not 1 <= li.port <= 65535:
            return f"listener {li.name!r}: port must be in [1, 65535], got {li.port}"
    if request.rack is not None and not 1 <= len(request.rack) <= MAX_NAME_CHARS:
        return f"rack must have 1 to {MAX_NAME_CHARS} characters, got {len(request.rack)}"
    return None


@attrs.frozen
class BrokerRegistrationReply:
    error: ApiError
    # The epoch the broker must send in heartbeats; -1 on error.
    broker_epoch: int = -1


@attrs.frozen
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    # The offset up to which the broker has replayed the metadata log.
    metadata_offset: int
    # The broker asks to stay (or become) fenced, e.g. while it is still loading.
    want_fence: bool = False
    want_shutdown: bool = False


@attrs.frozen
class BrokerHeartbeatReply:
    error: ApiError
    is_caught_up: bool = False
    is_fenced: bool = True
    in_controlled_shutdown: bool = False
    should_shut_down: bool = False


@attrs.frozen
class BrokerHeartbeatState:
    """Soft state: the last heartbeat of one broker incarnation."""

    broker_epoch: int
    last_contact_ms: int
    metadata_offset: int


def _change(
    broker: BrokerRegistration,
    fenced: pb.FenceChange.ValueType = pb.FENCE_CHANGE_UNCHANGED,
    shutdown: pb.ControlledShutdownChange.ValueType = pb.CONTROLLED_SHUTDOWN_CHANGE_UNCHANGED,
) -> MetadataRecord:
    return make_record(
        BrokerRegistrationChangeRecord(
            broker_id=broker.broker_id,
            broker_epoch=broker.broker_epoch,
            fenced=fenced,
            in_controlled_shutdown=shutdown,
        )
    )


class _NoPartitions:
    """Hooks for a cluster manager used without a replication manager (tests)."""

    def leaving_brokers_changes(self, broker_ids: frozenset[int]) -> list[MetadataRecord]:
        return []

    def ready_broker_changes(self, broker_id: int) -> list[MetadataRecord]:
        return []

    def leads_any(self, broker_id: int) -> bool:
        return False


class ClusterControlManager:
    def __init__(
        self,
        registry: SnapshotRegistry,
        *,
        cluster_id: str,
        session_timeout_ms: int,
        features: FeatureControlManager,
        controller_ids: frozenset[int] = frozenset(),
    ) -> None:
        assert session_timeout_ms > 0, session_timeout_ms
        self.cluster_id = cluster_id
        # A broker may not take a controller's node id (both are Raft node ids).
        self.controller_ids = controller_ids
        self.session_timeout_ms = session_timeout_ms
        self._features = features
        self._brokers: TimelineHashMap[int, BrokerRegistration] = TimelineHashMap(registry)
        # Soft state, never reverted: stale entries are harmless because every use
        # checks the entry's epoch against the registration.
        self._heartbeats: dict[int, BrokerHeartbeatState] = {}
        self._partitions: PartitionHooks = _NoPartitions()
        # The earliest an unfenced broker's session can expire, as of the last
        # `fence_stale_brokers` (None: no unfenced broker then). Heartbeats since
        # only move expiries later, so it is never late; a broker unfenced since
        # expires a full session after its heartbeat, later than any check due sooner.
        self.session_deadline_ms: int | None = None

    def bind_partitions(self, hooks: PartitionHooks) -> None:
        self._partitions = hooks

    # -- soft state --------------------------------------------------------------------

    def activate(self, now_ms: int) -> None:
        """On becoming the active controller: every registered broker gets a full
        session from now before it can be fenced."""
        self._heartbeats = {
            b.broker_id: BrokerHeartbeatState(b.broker_epoch, now_ms, -1)
            for b in self._brokers.values()
        }
        self.session_deadline_ms = None

    def clear_soft_state(self) -> None:
        self._heartbeats = {}
        self.session_deadline_ms = None

    def heartbeat_state(self, broker_id: int) -> BrokerHeartbeatState | None:
        return self._heartbeats.get(broker_id)

    def _is_live(self, broker_id: int, now_ms: int) -> bool:
        state = self._heartbeats.get(broker_id)
        return state is not None and now_ms - state.last_contact_ms <= self.session_timeout_ms

    # -- generation --------------------------------------------------------------------

    def register_broker(
        self, request: BrokerRegistrationRequest, *, next_offset: int, now_ms: int
    ) -> ControllerResult[BrokerRegistrationReply]:
        """Records registering (or re-registering) a broker; see the module docstring
        for ``next_offset``."""
        error = self._check_registration(request, now_ms)
        if not error.ok:
            return ControllerResult((), BrokerRegistrationReply(error))
        records: list[MetadataRecord] = []
        if request.broker_id in self._brokers:
            # The old incarnation is gone: take it out of ISRs and leaderships first.
            records += self._partitions.leaving_brokers_changes(frozenset({request.broker_id}))
        broker_epoch = next_offset + len(records)
        registration = BrokerRegistration(
            broker_id=request.broker_id,
            incarnation_id=request.incarnation_id,
            broker_epoch=broker_epoch,
            listeners=request.listeners,
            rack=request.rack,
            fenced=True,
            in_controlled_shutdown=False,
            supported_features=request.features,
        )
        records.append(make_record(broker_to_record(registration)))
        self._heartbeats[request.broker_id] = BrokerHeartbeatState(broker_epoch, now_ms, -1)
        return ControllerResult(tuple(records), BrokerRegistrationReply(OK, broker_epoch))

    def _check_registration(self, request: BrokerRegistrationRequest, now_ms: int) -> ApiError:
        if request.cluster_id != self.cluster_id:
            return ApiError(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"broker {request.broker_id} belongs to cluster {request.cluster_id!r} but "
                f"this controller's cluster is {self.cluster_id!r}; check its meta.properties",
            )
        problem = registration_problem(request, self.controller_ids)
        if problem is not None:
            return ApiError(ErrorCode.INVALID_REQUEST, problem)
        level = self._features.finalized_level(METADATA_VERSION)
        for feature in request.features:
            if (
                feature.name == METADATA_VERSION
                and level
                and not (feature.min_version <= level <= feature.max_version)
            ):
                return ApiError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"broker {request.broker_id} supports metadata.version "
                    f"[{feature.min_version}, {feature.max_version}] but the cluster is at "
                    f"{level}; run a broker version that supports {level}",
                )
        existing = self._brokers.get(request.broker_id)
        if (
            existing is not None
            and existing.incarnation_id != request.incarnation_id
            and self._is_live(request.broker_id, now_ms)
        ):
            last = self._heartbeats[request.broker_id].last_contact_ms
            return ApiError(
                ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                f"broker {request.broker_id} is registered by another live process "
                f"(incarnation {existing.incarnation_id}, last heard {now_ms - last} ms ago); "
                f"stop it, or retry after the {self.session_timeout_ms} ms session timeout",
            )
        return OK

    def process_heartbeat(
        self, request: BrokerHeartbeatRequest, *, now_ms: int
    ) -> ControllerResult[BrokerHeartbeatReply]:
        broker = self._brokers.get(request.broker_id)
        if broker is None:
            return ControllerResult(
                (),
                BrokerHeartbeatReply(
                    ApiError(
                        ErrorCode.BROKER_ID_NOT_REGISTERED,
                        f"broker {request.broker_id} is not registered; register it first",
                    )
                ),
            )
        if broker.broker_epoch != request.broker_epoch:
            return ControllerResult(
                (),
                BrokerHeartbeatReply(
                    ApiError(
                        ErrorCode.STALE_BROKER_EPOCH,
                        f"broker {request.broker_id} heartbeat has epoch {request.broker_epoch} "
                        f"but its registration has epoch {broker.broker_epoch}; re-register",
                    )
                ),
            )
        self._heartbeats[broker.broker_id] = BrokerHeartbeatState(
            broker.broker_epoch, now_ms, request.metadata_offset
        )
        caught_up = request.metadata_offset >= broker.broker_epoch
        records: list[MetadataRecord] = []
        fenced = broker.fenced
        shutting_down = broker.in_controlled_shutdown
        should_shut_down = False
        bid = broker.broker_id
        if broker.fenced:
            # A fenced broker leads nothing, so it may stop at once.
            should_shut_down = request.want_shutdown
            if caught_up and not (request.want_fence or request.want_shutdown or shutting_down):
                records.append(_change(broker, fenced=pb.FENCE_CHANGE_UNFENCE))
                records += self._partitions.ready_broker_changes(bid)
                fenced = False
        elif request.want_fence:
            records += self._partitions.leaving_brokers_changes(frozenset({bid}))
            records.append(_change(broker, fenced=pb.FENCE_CHANGE_FENCE))
            fenced = True
        elif request.want_shutdown or shutting_down:
            if not shutting_down:
                records += self._partitions.leaving_brokers_changes(frozenset({bid}))
                records.append(_change(broker, shutdown=pb.CONTROLLED_SHUTDOWN_CHANGE_ENTER))
            # Judged on the current state: the first heartbeat asking to shut down moves
            # the leaderships; a later one, after they committed, lets the broker stop.
            should_shut_down = shutting_down and not self._partitions.leads_any(bid)
            shutting_down = True
        else:
            records += self._partitions.ready_broker_changes(bid)
        reply = BrokerHeartbeatReply(OK, caught_up, fenced, shutting_down, should_shut_down)
        return ControllerResult(tuple(records), reply)

    def fence_stale_brokers(self, now_ms: int) -> ControllerResult[tuple[int, ...]]:
        """Fence every unfenced broker not heard from within the session timeout.

        The response is the fenced broker ids, ascending. A broker with no heartbeat
        state for its current epoch (e.g. registered before this controller became
        active and ``activate`` was not called) is given a full session from now.
        """
        stale: list[BrokerRegistration] = []
        deadline_ms: int | None = None
        for broker in sorted(self._brokers.values(), key=lambda b: b.broker_id):
            if broker.fenced:
                continue
            state = self._heartbeats.get(broker.broker_id)
            if state is None or state.broker_epoch != broker.broker_epoch:
                state = BrokerHeartbeatState(broker.broker_epoch, now_ms, -1)
                self._heartbeats[broker.broker_id] = state
            elif now_ms - state.last_contact_ms > self.session_timeout_ms:
                stale.append(broker)
                continue
            # Fenced once past the timeout (strictly): at the next millisecond.
            expiry_ms = state.last_contact_ms + self.session_timeout_ms + 1
            deadline_ms = expiry_ms if deadline_ms is None else min(deadline_ms, expiry_ms)
        self.session_deadline_ms = deadline_ms
        if not stale:
            return ControllerResult((), ())
        ids = frozenset(b.broker_id for b in stale)
        records = self._partitions.leaving_brokers_changes(ids)
        records += [_change(b, fenced=pb.FENCE_CHANGE_FENCE) for b in stale]
        return ControllerResult(tuple(records), tuple(sorted(ids)))

    def unregister_broker(self, broker_id: int) -> ControllerResult[ApiError]:
        broker = self._brokers.get(broker_id)
        if broker is None:
            return ControllerResult(
                (),
                ApiError(
                    ErrorCode.BROKER_ID_NOT_REGISTERED,
                    f"broker {broker_id} is not registered; nothing to unregister",
                ),
            )
        records = self._partitions.leaving_brokers_changes(frozenset({broker_id}))
        records.append(
            make_record(
                UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=broker.broker_epoch)
            )
        )
        self._heartbeats.pop(broker_id, None)
        return ControllerResult(tuple(records), OK)

    # -- replay ------------------------------------------------------------------------

    def replay_register(self, record: RegisterBrokerRecord) -> None:
        # A new incarnation replaces the old registration wholesale.
        self._brokers[record.broker_id] = broker_from_record(record)

    def replay_unregister(self, record: UnregisterBrokerRecord) -> None:
        broker = self._brokers.get(record.broker_id)
        if broker is None or broker.broker_epoch != record.broker_epoch:
            found = "not registered" if broker is None else f"at epoch {broker.broker_epoch}"
            raise MetadataReplayError(
                f"cannot unregister broker {record.broker_id} at epoch {record.broker_epoch}: "
                f"it is {found}"
            )
        del self._brokers[record.broker_id]

    def replay_change(self, record: BrokerRegistrationChangeRecord) -> None:
        broker = self._brokers.get(record.broker_id)
        if broker is None:
            raise MetadataReplayError(
                f"registration change for broker {record.broker_id}, which is not registered"
            )
        # A change aimed at an older incarnation is ignored (metadata.proto).
        if broker.broker_epoch == record.broker_epoch:
            self._brokers[record.broker_id] = broker.apply(record)

    # -- queries -----------------------------------------------------------------------

    def broker(self, broker_id: int, epoch: int | None = None) -> BrokerRegistration | None:
        return self._brokers.get(broker_id, None, epoch=epoch)

    def brokers(self, epoch: int | None = None) -> tuple[BrokerRegistration, ...]:
        """Every registration, by broker id."""
        return tuple(sorted(self._brokers.values(epoch=epoch), key=lambda b: b.broker_id))

    def metadata_version(self) -> int:
        """The finalized metadata.version (0, not finalized yet, reads as the latest:
        what a new cluster bootstraps at)."""
        return self._features.finalized_level(METADATA_VERSION) or LATEST_METADATA_VERSION

    def is_registered(self, broker_id: int) -> bool:
        return broker_id in self._brokers

    def is_usable(self, broker_id: int) -> bool:
        """May lead and be in an ISR: registered, unfenced, not shutting down."""
        broker = self._brokers.get(broker_id)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def usable_broker_ids(self, epoch: int | None = None) -> tuple[int, ...]:
        return tuple(
            b.broker_id
            for b in self.brokers(epoch)
            if not b.fenced and not b.in_controlled_shutdown
        )

    def racks(
        self, broker_ids: Iterable[int] | None = None, epoch: int | None = None
    ) -> dict[int, str | None]:
        """Broker id -> rack (None = no rack), for ``broker_ids`` (registered) or every
        broker."""
        brokers = {b.broker_id: b for b in self.brokers(epoch)}
        ids = sorted(brokers) if broker_ids is None else broker_ids
        return {bid: brokers[bid].rack for bid in ids}

    def snapshot_records(self, epoch: int | None = None) -> list[MetadataRecord]:
        return [make_record(broker_to_record(b)) for b in self.brokers(epoch)]
