"""Config manager: dynamic cluster, broker and topic configs.

State: one timeline map ``(resource type, resource name, key) -> value`` and an index
``(resource type, resource name) -> frozenset of keys`` (for describe, deletion of a
topic's configs, and snapshots). Only known keys with valid values are ever generated
(``config_schema``); replay stores whatever the log says.

Resource names: a topic's name; a broker id in decimal, or "" for the cluster-wide
broker default; "" for the cluster. A topic's effective value falls back to the
cluster-wide broker default of the same key, then to the static default.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence

import attrs

from controller.metadata.config_schema import (
    CONFIG_KEYS,
    ConfigKey,
    ConfigType,
    ResourceType,
    join_list,
    split_list,
)
from controller.metadata.errors import (
    OK,
    ApiError,
    ControllerResult,
    ErrorCode,
    MetadataReplayError,
    condition_failed,
)
from controller.metadata.levels import Feature, needs_level
from controller.records import ConfigRecord, MetadataRecord, make_record
from controller.records import metadata_pb2 as pb
from timeline import SnapshotRegistry, TimelineHashMap

CLUSTER_DEFAULT = ""  # the resource name of the cluster-wide broker default and the cluster


class OpType(enum.StrEnum):
    """IncrementalAlterConfigs operations."""

    SET = "SET"
    DELETE = "DELETE"
    # For LIST keys only: add items not present / remove items present.
    APPEND = "APPEND"
    SUBTRACT = "SUBTRACT"


class ConfigSource(enum.StrEnum):
    DEFAULT = "DEFAULT"
    DYNAMIC_TOPIC = "DYNAMIC_TOPIC"
    DYNAMIC_BROKER = "DYNAMIC_BROKER"
    DYNAMIC_DEFAULT_BROKER = "DYNAMIC_DEFAULT_BROKER"
    DYNAMIC_CLUSTER = "DYNAMIC_CLUSTER"


@attrs.frozen
class ConfigResource:
    type: ResourceType
    name: str


@attrs.frozen
class AlterConfigOp:
    key: str
    op: OpType
    # Required for SET, APPEND, SUBTRACT; ignored for DELETE.
    value: str | None = None


@attrs.frozen
class AlterConfigsResource:
    resource: ConfigResource
    ops: tuple[AlterConfigOp, ...]
    # Only if the resource's mod offset is this (-1: only if it has no dynamic
    # config); None: no condition.
    if_mod_offset: int | None = None


@attrs.frozen
class AlterConfigsResult:
    resource: ConfigResource
    error: ApiError


@attrs.frozen
class ConfigEntry:
    key: str
    value: str
    source: ConfigSource
    type: ConfigType
    doc: str


@attrs.frozen
class DescribeConfigsResult:
    resource: ConfigResource
    error: ApiError
    entries: tuple[ConfigEntry, ...] = ()
    # The log offset of the last change of its dynamic configs; -1 while it has none.
    mod_offset: int = -1


_DYNAMIC_SOURCE = {
    ResourceType.TOPIC: ConfigSource.DYNAMIC_TOPIC,
    ResourceType.BROKER: ConfigSource.DYNAMIC_BROKER,
    ResourceType.CLUSTER: ConfigSource.DYNAMIC_CLUSTER,
}

_Key = tuple[int, str, str]
_Resource = tuple[int, str]


def config_record(resource: ConfigResource, key: str, value: str | None) -> MetadataRecord:
    msg = ConfigRecord(
        resource_type=pb.ConfigResourceType.ValueType(int(resource.type)),
        resource_name=resource.name,
        name=key,
    )
    if value is not None:
        msg.value = value
    return make_record(msg)


def _invalid(key: str, value: str | None, spec: ConfigKey) -> ApiError:
    return ApiError(
        ErrorCode.INVALID_CONFIG,
        f"invalid value {value!r} for config {key!r}: expected {spec.allowed()}",
    )


class ConfigurationControlManager:
    def __init__(
        self,
        registry: SnapshotRegistry,
        *,
        topic_exists: Callable[[str, int | None], bool] | None = None,
    ) -> None:
        self._values: TimelineHashMap[_Key, str] = TimelineHashMap(registry)
        self._keys: TimelineHashMap[_Resource, frozenset[str]] = TimelineHashMap(registry)
        # Resource -> the offset of the last record that changed its dynamic configs
        # (its version for conditional writes); absent while it has none. A snapshot's
        # records are all replayed at its last offset, which so stands for changes
        # older than the snapshot (an upper bound: see docs, conditional writes).
        self._mods: TimelineHashMap[_Resource, int] = TimelineHashMap(registry)
        self._mod_floor: Callable[[int | None], int | None] = lambda _epoch: None
        self._level: Callable[[], int] = lambda: 0
        self._topic_exists = topic_exists

    def bind_mod_floor(self, mod_floor: Callable[[int | None], int | None],
                       level: Callable[[], int]) -> None:
        """``FeatureControlManager.mod_floor`` (None below metadata.version 8) and the
        finalized level (for the message refusing a condition below 8)."""
        self._mod_floor, self._level = mod_floor, level

    def bind_topics(self, topic_exists: Callable[[str, int | None], bool]) -> None:
        """``topic_exists(name, epoch)``: whether the topic exists (at ``epoch``)."""
        self._topic_exists = topic_exists

    # -- validation --------------------------------------------------------------------

    def check_resource(self, resource: ConfigResource, epoch: int | None = None) -> ApiError:
        if resource.type is ResourceType.TOPIC:
            exists = self._topic_exists is not None and self._topic_exists(resource.name, epoch)
            if not exists:
                return ApiError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"topic {resource.name!r} does not exist; create it before configuring it",
                )
        elif resource.type is ResourceType.BROKER:
            if resource.name != CLUSTER_DEFAULT and not (
                resource.name.isdigit() and resource.name.isascii()
            ):
                return ApiError(
                    ErrorCode.INVALID_REQUEST,
                    f"broker config resource name {resource.name!r} must be a broker id "
                    "or '' for the cluster-wide default",
                )
        elif resource.name != CLUSTER_DEFAULT:
            return ApiError(
                ErrorCode.INVALID_REQUEST,
                f"the cluster config resource name must be '', not {resource.name!r}",
            )
        return OK

    @staticmethod
    def check_key(resource_type: ResourceType, key: str) -> ConfigKey | ApiError:
        spec = CONFIG_KEYS.get(key)
        if spec is None or resource_type not in spec.applies_to:
            known = sorted(k for k, s in CONFIG_KEYS.items() if resource_type in s.applies_to)
            kind = resource_type.name.lower()
            what = (
                f"unknown config {key!r}"
                if spec is None
                else f"config {key!r} cannot be set on a {kind}"
            )
            return ApiError(
                ErrorCode.INVALID_CONFIG, f"{what}; {kind} configs are: {', '.join(known)}"
            )
        return spec

    def new_topic_config_records(
        self, topic: str, configs: Sequence[tuple[str, str]]
    ) -> tuple[ApiError, list[MetadataRecord]]:
        """Validate the configs given with a CreateTopics item; records to write them."""
        resource = ConfigResource(ResourceType.TOPIC, topic)
        seen: set[str] = set()
        records: list[MetadataRecord] = []
        for key, value in configs:
            if key in seen:
                return ApiError(
                    ErrorCode.INVALID_CONFIG, f"config {key!r} is given more than once"
                ), []
            seen.add(key)
            spec = self.check_key(ResourceType.TOPIC, key)
            if isinstance(spec, ApiError):
                return spec, []
            canonical = spec.normalize(value)
            if canonical is None:
                return _invalid(key, value, spec), []
            records.append(config_record(resource, key, canonical))
        return OK, records

    # -- generation --------------------------------------------------------------------

    def incremental_alter_configs(
        self, requests: Sequence[AlterConfigsResource], *, validate_only: bool = False
    ) -> ControllerResult[tuple[AlterConfigsResult, ...]]:
        """Per-resource results; a resource's ops apply all or none."""
        counts: dict[ConfigResource, int] = {}
        for request in requests:
            counts[request.resource] = counts.get(request.resource, 0) + 1
        records: list[MetadataRecord] = []
        results: list[AlterConfigsResult] = []
        for request in requests:
            if counts[request.resource] > 1:
                error = ApiError(
                    ErrorCode.DUPLICATE_RESOURCE,
                    f"{request.resource.type.name.lower()} {request.resource.name!r} appears "
                    "more than once in the request; merge its operations into one entry",
                )
                resource_records: list[MetadataRecord] = []
            else:
                error, resource_records = self._alter_resource(request)
            results.append(AlterConfigsResult(request.resource, error))
            records.extend(resource_records)
        return ControllerResult(() if validate_only else tuple(records), tuple(results))

    def _alter_resource(
        self, request: AlterConfigsResource
    ) -> tuple[ApiError, list[MetadataRecord]]:
        resource = request.resource
        error = self.check_resource(resource)
        if not error.ok:
            return error, []
        if request.if_mod_offset is not None:
            mod_offset = self.mod_offset(resource)
            if self._mod_floor(None) is None:
                return ApiError(ErrorCode.UNSUPPORTED_VERSION,
                                needs_level(Feature.MOD_OFFSETS, self._level())), []
            if mod_offset != request.if_mod_offset:
                return condition_failed(
                    f"the dynamic configs of {resource.type.name.lower()} {resource.name!r}",
                    mod_offset, request.if_mod_offset), []
        seen: set[str] = set()
        records: list[MetadataRecord] = []
        for op in request.ops:
            if op.key in seen:
                return ApiError(
                    ErrorCode.INVALID_REQUEST,
                    f"config {op.key!r} has more than one operation in one request",
                ), []
            seen.add(op.key)
            spec = self.check_key(resource.type, op.key)
            if isinstance(spec, ApiError):
                return spec, []
            if spec.read_only:
                return ApiError(ErrorCode.INVALID_CONFIG,
                                f"config {op.key!r} is read-only: {spec.doc}"), []
            current = self.get(resource, op.key)
            outcome = self._new_value(spec, op, current)
            if isinstance(outcome, ApiError):
                return outcome, []
            new_value = outcome
            if new_value != current:
                records.append(config_record(resource, op.key, new_value))
        return OK, records

    @staticmethod
    def _new_value(
        spec: ConfigKey, op: AlterConfigOp, current: str | None
    ) -> str | ApiError | None:
        if op.op is OpType.DELETE:
            return None
        if op.value is None:
            return ApiError(
                ErrorCode.INVALID_REQUEST, f"{op.op.value} of config {op.key!r} needs a value"
            )
        if op.op is OpType.SET:
            canonical = spec.normalize(op.value)
            return _invalid(op.key, op.value, spec) if canonical is None else canonical
        if spec.type is not ConfigType.LIST:
            return ApiError(
                ErrorCode.INVALID_CONFIG,
                f"{op.op.value} applies only to list configs; {op.key!r} is {spec.type.value}, "
                "use SET",
            )
        # Like Kafka, APPEND/SUBTRACT start from the dynamic value, else the default.
        items = split_list(spec.default if current is None else current)
        change = split_list(op.value)
        if op.op is OpType.APPEND:
            items += [item for item in change if item not in items]
        else:
            items = [item for item in items if item not in change]
        if not items:
            return ApiError(
                ErrorCode.INVALID_CONFIG,
                f"subtracting {op.value!r} would leave {op.key!r} empty; it must hold at least "
                "one item (DELETE it to return to the default)",
            )
        canonical = spec.normalize(join_list(items))
        return _invalid(op.key, op.value, spec) if canonical is None else canonical

    # -- replay ------------------------------------------------------------------------

    def replay(self, record: ConfigRecord, offset: int = -1) -> None:
        kind = int(record.resource_type)
        if kind not in ResourceType._value2member_map_:
            raise MetadataReplayError(f"config record has unknown resource type {kind}")
        resource: _Resource = (kind, record.resource_name)
        keys = self._keys.get(resource, frozenset())
        if record.HasField("value"):
            self._values[(kind, record.resource_name, record.name)] = record.value
            if record.name not in keys:
                self._keys[resource] = keys | {record.name}
            self._mods[resource] = (record.mod_offset if record.HasField("mod_offset")
                                    else offset)
        else:
            self._values.pop((kind, record.resource_name, record.name), None)
            if record.name in keys:
                remaining = keys - {record.name}
                if remaining:
                    self._keys[resource] = remaining
                    self._mods[resource] = offset
                else:
                    del self._keys[resource]
                    self._mods.pop(resource, None)

    def remove_topic_configs(self, topic: str) -> None:
        """Replay side effect of RemoveTopicRecord: a deleted topic's configs go too."""
        resource: _Resource = (int(ResourceType.TOPIC), topic)
        for key in self._keys.get(resource, frozenset()):
            del self._values[(resource[0], topic, key)]
        self._keys.pop(resource, None)
        self._mods.pop(resource, None)

    def mod_offset(self, resource: ConfigResource, epoch: int | None = None) -> int:
        """The offset of the last change of the resource's dynamic configs (-1: it
        has none, or metadata.version is below 8)."""
        floor = self._mod_floor(epoch)
        found = self._mods.get((int(resource.type), resource.name), -1, epoch=epoch)
        return -1 if floor is None or found < 0 else max(found, floor)

    # -- queries -----------------------------------------------------------------------

    def get(self, resource: ConfigResource, key: str, epoch: int | None = None) -> str | None:
        """The dynamic value set on exactly this resource, or None."""
        return self._values.get((int(resource.type), resource.name, key), None, epoch=epoch)

    def dynamic_configs(self, resource: ConfigResource, epoch: int | None = None) -> dict[str, str]:
        keys = self._keys.get((int(resource.type), resource.name), frozenset(), epoch=epoch)
        result: dict[str, str] = {}
        for key in sorted(keys):
            value = self.get(resource, key, epoch)
            assert value is not None, f"key index and values disagree on {key}"
            result[key] = value
        return result

    def effective(
        self, resource: ConfigResource, key: str, epoch: int | None = None
    ) -> tuple[str, ConfigSource]:
        """The value in force and where it comes from (dynamic, inherited, default)."""
        value = self.get(resource, key, epoch)
        if value is not None:
            return value, _DYNAMIC_SOURCE[resource.type]
        # A topic or one broker inherits the cluster-wide broker default.
        inherits = resource.type is ResourceType.TOPIC or (
            resource.type is ResourceType.BROKER and resource.name != CLUSTER_DEFAULT
        )
        if inherits:
            value = self.get(ConfigResource(ResourceType.BROKER, CLUSTER_DEFAULT), key, epoch)
            if value is not None:
                return value, ConfigSource.DYNAMIC_DEFAULT_BROKER
        spec = CONFIG_KEYS.get(key)
        if spec is None:
            raise KeyError(f"unknown config key {key!r}")
        return spec.default, ConfigSource.DEFAULT

    def topic_flag(self, topic: str, key: str, epoch: int | None = None) -> bool:
        value, _ = self.effective(ConfigResource(ResourceType.TOPIC, topic), key, epoch)
        return value == "true"

    def topic_int(self, topic: str, key: str, epoch: int | None = None) -> int:
        """A topic's integer config: its own value, else the defaults."""
        value, _ = self.effective(ConfigResource(ResourceType.TOPIC, topic), key, epoch)
        return int(value)

    def cluster_int(self, key: str, epoch: int | None = None) -> int:
        """A cluster-level integer: the cluster value, else the broker default, else static."""
        value = self.get(ConfigResource(ResourceType.CLUSTER, CLUSTER_DEFAULT), key, epoch)
        if value is None:
            value, _ = self.effective(
                ConfigResource(ResourceType.BROKER, CLUSTER_DEFAULT), key, epoch
            )
        return int(value)

    def describe_configs(
        self, resources: Sequence[ConfigResource], epoch: int | None = None
    ) -> tuple[DescribeConfigsResult, ...]:
        results: list[DescribeConfigsResult] = []
        for resource in resources:
            error = self.check_resource(resource, epoch)
            if not error.ok:
                results.append(DescribeConfigsResult(resource, error))
                continue
            entries = []
            for key, spec in sorted(CONFIG_KEYS.items()):
                if resource.type in spec.applies_to:
                    value, source = self.effective(resource, key, epoch)
                    entries.append(ConfigEntry(key, value, source, spec.type, spec.doc))
            results.append(DescribeConfigsResult(resource, OK, tuple(entries),
                                                 self.mod_offset(resource, epoch)))
        return tuple(results)

    def all_configs(self, epoch: int | None = None) -> Mapping[_Key, str]:
        """Every dynamic value, sorted by (resource type, name, key)."""
        return dict(sorted(self._values.items(epoch=epoch)))

    def snapshot_records(self, epoch: int | None = None) -> list[MetadataRecord]:
        """Every dynamic value; from metadata.version 8 each carries its resource's
        mod offset."""
        records = []
        for (kind, name, key), value in self.all_configs(epoch).items():
            resource = ConfigResource(ResourceType(kind), name)
            record = config_record(resource, key, value)
            mod_offset = self.mod_offset(resource, epoch)
            if mod_offset >= 0:
                record.config.mod_offset = mod_offset
            records.append(record)
        return records
