"""ACL manager: creates and deletes ACL bindings (generate only; replay mutates).

Each stored binding has an id (a uuid, the record's identity). Creating a binding
that already exists is a success that writes nothing (Kafka does the same), so a
retried create is harmless; deleting returns, per filter, the bindings it matched.
The committed bindings feed the authorizer (`controller.security.authorizer`)
through `version`, which changes on every ACL record replayed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs

from controller.metadata.errors import (
    OK,
    ApiError,
    ControllerResult,
    ErrorCode,
    MetadataReplayError,
)
from controller.metadata.placement import RandomSource, new_uuid
from controller.records import (
    AccessControlEntryRecord,
    MetadataRecord,
    RemoveAccessControlEntryRecord,
    make_record,
)
from controller.security.acl import (
    AclBinding,
    AclFilter,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from timeline import SnapshotRegistry, TimelineHashMap, TimelineLong

# A bound on the whole ACL table (each ACL is in every snapshot and every check's index).
MAX_ACLS = 100_000


@attrs.frozen
class AclEntry:
    """A stored access control entry (wire enum values kept as ints, so an entry of a
    type this version does not know still replays and snapshots unchanged)."""

    id: str
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    @classmethod
    def from_record(cls, record: AccessControlEntryRecord) -> AclEntry:
        return cls(record.id, int(record.resource_type), record.resource_name,
                   int(record.pattern_type), record.principal, record.host,
                   int(record.operation), int(record.permission_type))

    @classmethod
    def of(cls, entry_id: str, binding: AclBinding) -> AclEntry:
        return cls(entry_id, binding.resource_type.value, binding.resource_name,
                   binding.pattern_type.value, binding.principal, binding.host,
                   binding.operation.value, binding.permission.value)

    def to_record(self) -> AccessControlEntryRecord:
        return AccessControlEntryRecord(
            id=self.id,
            resource_type=self.resource_type,  # type: ignore[arg-type]
            resource_name=self.resource_name,
            pattern_type=self.pattern_type,  # type: ignore[arg-type]
            principal=self.principal,
            host=self.host,
            operation=self.operation,  # type: ignore[arg-type]
            permission_type=self.permission_type,  # type: ignore[arg-type]
        )

    def binding(self) -> AclBinding | None:
        """The binding, or None if it uses a value this version does not know."""
        try:
            return AclBinding(ResourceType(self.resource_type), self.resource_name,
                              PatternType(self.pattern_type), self.principal, self.host,
                              Operation(self.operation), Permission(self.permission_type))
        except ValueError:
            return None


@attrs.frozen
class CreateAclResult:
    binding: AclBinding
    error: ApiError


@attrs.frozen
class DescribeAclsResult:
    error: ApiError
    bindings: tuple[AclBinding, ...] = ()


@attrs.frozen
class DeleteAclsResult:
    filter: AclFilter
    error: ApiError
    # The bindings this filter matched (and deleted), in id order.
    deleted: tuple[AclBinding, ...] = ()


class AclControlManager:
    def __init__(self, registry: SnapshotRegistry, *, rng: RandomSource) -> None:
        self._entries: TimelineHashMap[str, AclEntry] = TimelineHashMap(registry)
        # Bumped by every ACL record replayed: the authorizer rebuilds its index when
        # the committed value changes.
        self._version = TimelineLong(registry, 0)
        self._rng = rng

    # ------------------------------------------------------------------ reads

    def entries(self, epoch: int | None = None) -> tuple[AclEntry, ...]:
        return tuple(entry for _, entry in sorted(self._entries.items(epoch=epoch)))

    def version(self, epoch: int | None = None) -> int:
        return self._version.get(epoch)

    def _bound(self, epoch: int | None = None) -> Iterator[tuple[str, AclBinding]]:
        for entry_id, entry in sorted(self._entries.items(epoch=epoch)):
            binding = entry.binding()
            if binding is not None:
                yield entry_id, binding

    def bindings(self, epoch: int | None = None) -> Iterator[AclBinding]:
        return (binding for _, binding in self._bound(epoch))

    def describe_acls(self, acl_filter: AclFilter, epoch: int | None = None
                      ) -> DescribeAclsResult:
        try:
            acl_filter.validate()
        except InvalidAclError as exc:
            return DescribeAclsResult(ApiError(ErrorCode.INVALID_REQUEST, str(exc)))
        return DescribeAclsResult(OK, tuple(b for b in self.bindings(epoch)
                                            if acl_filter.matches(b)))

    # ------------------------------------------------------------------ writes

    def create_acls(self, bindings: Sequence[AclBinding]
                    ) -> ControllerResult[tuple[CreateAclResult, ...]]:
        existing = set(self.bindings())
        records: list[MetadataRecord] = []
        results: list[CreateAclResult] = []
        for binding in bindings:
            try:
                binding.validate()
            except InvalidAclError as exc:
                results.append(CreateAclResult(binding, ApiError(ErrorCode.INVALID_REQUEST,
                                                                 str(exc))))
                continue
            if binding not in existing:
                if len(existing) >= MAX_ACLS:
                    results.append(CreateAclResult(binding, ApiError(
                        ErrorCode.INVALID_REQUEST,
                        f"the cluster holds {MAX_ACLS} ACLs, the most it keeps; remove some "
                        "(or use PREFIXED bindings) first")))
                    continue
                existing.add(binding)
                entry = AclEntry.of(new_uuid(self._rng), binding)
                records.append(make_record(entry.to_record()))
            results.append(CreateAclResult(binding, OK))
        return ControllerResult(tuple(records), tuple(results))

    def delete_acls(self, filters: Sequence[AclFilter]
                    ) -> ControllerResult[tuple[DeleteAclsResult, ...]]:
        bound = list(self._bound())
        removed: set[str] = set()
        records: list[MetadataRecord] = []
        results: list[DeleteAclsResult] = []
        for acl_filter in filters:
            try:
                acl_filter.validate()
            except InvalidAclError as exc:
                results.append(DeleteAclsResult(acl_filter, ApiError(ErrorCode.INVALID_REQUEST,
                                                                     str(exc))))
                continue
            matched = [(i, b) for i, b in bound if acl_filter.matches(b)]
            for entry_id, _ in matched:
                if entry_id not in removed:
                    removed.add(entry_id)
                    records.append(make_record(RemoveAccessControlEntryRecord(id=entry_id)))
            results.append(DeleteAclsResult(acl_filter, OK, tuple(b for _, b in matched)))
        return ControllerResult(tuple(records), tuple(results))

    # ------------------------------------------------------------------ replay

    def replay_create(self, record: AccessControlEntryRecord) -> None:
        entry = AclEntry.from_record(record)
        if entry.id in self._entries:
            raise MetadataReplayError(f"ACL {entry.id} already exists")
        self._entries[entry.id] = entry
        self._version.increment()

    def replay_remove(self, record: RemoveAccessControlEntryRecord) -> None:
        if record.id not in self._entries:
            raise MetadataReplayError(f"cannot remove unknown ACL {record.id}")
        del self._entries[record.id]
        self._version.increment()

    def snapshot_records(self, epoch: int | None = None) -> list[MetadataRecord]:
        return [make_record(entry.to_record()) for entry in self.entries(epoch)]

