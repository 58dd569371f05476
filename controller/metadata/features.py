"""Feature manager: finalized feature levels (today only ``metadata.version``).

``metadata.version`` gates what the cluster may write (levels.py). A fresh cluster
bootstraps at the newest level this software supports. Upgrades are allowed when
every voter and registered broker supports the new level. A downgrade is explicit:
SAFE_DOWNGRADE passes only while the state holds nothing the lower level cannot keep
(`MetadataState.needing_level_above`: tier objects, request results);
UNSAFE_DOWNGRADE passes anyway, and the next snapshot leaves that data out.
Nothing is ever downgraded silently.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from controller.metadata.errors import (
    OK,
    ApiError,
    ControllerResult,
    ErrorCode,
    MetadataReplayError,
)
from controller.metadata.levels import (
    LATEST_METADATA_VERSION,
    MINIMUM_METADATA_VERSION,
    Feature,
    enabled,
)
from controller.records import FeatureLevelRecord, MetadataRecord, make_record
from controller.records.domain import BrokerRegistration
from timeline import SnapshotRegistry, TimelineHashMap, TimelineLong

METADATA_VERSION = "metadata.version"
# The metadata.version levels this software can read and write, inclusive: what
# each allows is the table in levels.py (add a level there for a new record type or
# behaviour).

# Feature name -> (min, max) supported level, inclusive.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION),
}


class UpgradeType(enum.StrEnum):
    """How a feature update may move the level (Kafka's FeatureUpdate.UpgradeType)."""

    UPGRADE = "UPGRADE"
    # Only while the state holds nothing the lower level cannot keep.
    SAFE_DOWNGRADE = "SAFE_DOWNGRADE"
    UNSAFE_DOWNGRADE = "UNSAFE_DOWNGRADE"


@attrs.frozen
class FeatureUpdate:
    name: str
    level: int
    upgrade_type: UpgradeType = UpgradeType.UPGRADE


@attrs.frozen
class FeatureUpdateResult:
    name: str
    error: ApiError


@attrs.frozen
class FeatureDescription:
    name: str
    # 0 when the feature is not finalized.
    finalized_level: int
    min_supported: int
    max_supported: int


# Releases before 0.3.0 did not say their range, and supported at most this.
_LEVEL_BEFORE_RANGES_WERE_SAID = 3


class UnsupportedFeatureLevelError(MetadataReplayError):
    """The log finalizes a level this software does not support."""


def _check_controllers(level: int, controllers: Mapping[int, tuple[int, int]]) -> ApiError:
    for node_id, (low, high) in sorted(controllers.items()):
        if (low, high) == (0, 0):
            return ApiError(
                ErrorCode.INVALID_UPDATE_VERSION,
                f"controller {node_id} has not said which metadata.version levels it "
                "supports (a release before 0.3.0, which supports at most 3, or it has not "
                "fetched from this leader yet); upgrade it, or retry in a moment")
        if not low <= level <= high:
            return ApiError(
                ErrorCode.INVALID_UPDATE_VERSION,
                f"controller {node_id} supports metadata.version only in [{low}, {high}], "
                f"not {level}; upgrade that controller first")
    return OK


class FeatureControlManager:
    """Owns the finalized feature levels (a timeline map name -> level)."""

    def __init__(
        self,
        registry: SnapshotRegistry,
        *,
        brokers: Callable[[], Iterable[BrokerRegistration]] | None = None,
    ) -> None:
        self._levels: TimelineHashMap[str, int] = TimelineHashMap(registry)
        # Offset of the last record that lowered a level (-1: none), so the controller
        # snapshots right after an unsafe downgrade commits.
        self._lowered_at = TimelineLong(registry, -1)
        # Where metadata.version reached MOD_OFFSETS' level: changes older than that
        # report it as their mod offset (a controller that loaded an older snapshot
        # knows them only as "at or before the snapshot"), so every controller agrees.
        self._mod_floor = TimelineLong(registry, -1)
        # Registered brokers, to check they support a new level (wired by MetadataState).
        self._brokers = brokers
        self._needs_higher: Callable[[int], list[str]] = lambda _level: []

    def bind_brokers(self, brokers: Callable[[], Iterable[BrokerRegistration]]) -> None:
        self._brokers = brokers

    def bind_state_needing(self, needing: Callable[[int], list[str]]) -> None:
        """What the current state holds that a level below the given one cannot keep
        (wired by MetadataState): a safe downgrade is one that leaves it empty."""
        self._needs_higher = needing

    # -- generation --------------------------------------------------------------------

    @staticmethod
    def bootstrap_records(
        metadata_version: int = LATEST_METADATA_VERSION,
    ) -> tuple[MetadataRecord, ...]:
        """The records a fresh cluster starts its log with."""
        low, high = SUPPORTED_FEATURES[METADATA_VERSION]
        if not low <= metadata_version <= high:
            raise ValueError(
                f"bootstrap metadata.version {metadata_version} is outside the supported "
                f"range [{low}, {high}]"
            )
        return (
            make_record(FeatureLevelRecord(name=METADATA_VERSION, feature_level=metadata_version)),
        )

    def update_features(
        self, updates: Sequence[FeatureUpdate], *, validate_only: bool = False,
        controllers: Mapping[int, tuple[int, int]] | None = None,
    ) -> ControllerResult[tuple[FeatureUpdateResult, ...]]:
        """Per-feature results; records only for valid updates that change a level.

        `controllers`: each voter's supported metadata.version range as it reported
        it ((0, 0): not reported); a level outside any voter's range is refused."""
        records: list[MetadataRecord] = []
        results: list[FeatureUpdateResult] = []
        counts: dict[str, int] = {}
        for update in updates:
            counts[update.name] = counts.get(update.name, 0) + 1
        for update in updates:
            if counts[update.name] > 1:
                error = ApiError(
                    ErrorCode.DUPLICATE_RESOURCE,
                    f"feature {update.name!r} appears {counts[update.name]} times in one "
                    "request; send one update per feature",
                )
            else:
                error = self._check_update(update)
                if (error.ok and update.name == METADATA_VERSION and controllers is not None
                        and update.level > self.finalized_level(update.name)):
                    error = _check_controllers(update.level, controllers)
            results.append(FeatureUpdateResult(update.name, error))
            if error.ok and update.level != self.finalized_level(update.name):
                records.append(
                    make_record(FeatureLevelRecord(name=update.name, feature_level=update.level))
                )
        return ControllerResult(() if validate_only else tuple(records), tuple(results))

    def _check_update(self, update: FeatureUpdate) -> ApiError:
        supported = SUPPORTED_FEATURES.get(update.name)
        if supported is None:
            return ApiError(
                ErrorCode.INVALID_UPDATE_VERSION,
                f"unknown feature {update.name!r}; known features: {sorted(SUPPORTED_FEATURES)}",
            )
        low, high = supported
        if not low <= update.level <= high:
            return ApiError(
                ErrorCode.INVALID_UPDATE_VERSION,
                f"{update.name} level {update.level} is outside the range this controller "
                f"supports, [{low}, {high}]",
            )
        current = self.finalized_level(update.name)
        if update.level < current:
            if update.upgrade_type is UpgradeType.UPGRADE:
                return ApiError(
                    ErrorCode.INVALID_UPDATE_VERSION,
                    f"{update.name} is at {current}; going to {update.level} is a downgrade, "
                    "which must be requested explicitly as UNSAFE_DOWNGRADE (`metakraft "
                    "features downgrade --unsafe`)",
                )
            if update.upgrade_type is UpgradeType.SAFE_DOWNGRADE:
                needing = self._needs_higher(update.level) if update.name == METADATA_VERSION \
                    else [f"no safe downgrade of {update.name} is known"]
                if needing:
                    return ApiError(
                        ErrorCode.INVALID_UPDATE_VERSION,
                        f"a safe downgrade of {update.name} from {current} to "
                        f"{update.level} is refused: {'; '.join(needing)}. Use "
                        "UNSAFE_DOWNGRADE (`metakraft features downgrade --unsafe`) to "
                        "drop that data from the next snapshot, if you accept losing it",
                    )
        for broker in self._brokers() if self._brokers is not None else ():
            said = {f.name for f in broker.supported_features}
            if update.name == METADATA_VERSION and update.name not in said \
                    and update.level > max(current, _LEVEL_BEFORE_RANGES_WERE_SAID):
                return ApiError(
                    ErrorCode.INVALID_UPDATE_VERSION,
                    f"broker {broker.broker_id} did not say which {update.name} levels it "
                    f"supports (a release before 0.3.0: at most "
                    f"{_LEVEL_BEFORE_RANGES_WERE_SAID}); upgrade that broker first")
            for feature in broker.supported_features:
                if feature.name == update.name and not (
                    feature.min_version <= update.level <= feature.max_version
                ):
                    return ApiError(
                        ErrorCode.INVALID_UPDATE_VERSION,
                        f"broker {broker.broker_id} supports {update.name} only in "
                        f"[{feature.min_version}, {feature.max_version}], not {update.level}; "
                        "upgrade that broker first",
                    )
        return OK

    # -- replay ------------------------------------------------------------------------

    def replay(self, record: FeatureLevelRecord, offset: int = -1) -> None:
        supported = SUPPORTED_FEATURES.get(record.name)
        if supported is not None and record.feature_level and not (
                supported[0] <= record.feature_level <= supported[1]):
            # A node older than the cluster's level: it may not read what follows.
            raise UnsupportedFeatureLevelError(
                f"the cluster's {record.name} is {record.feature_level} but this software "
                f"supports [{supported[0]}, {supported[1]}]: run a release that supports "
                f"{record.feature_level} (docs/operations.md, Upgrading)")
        if 0 < record.feature_level < self.finalized_level(record.name):
            self._lowered_at.set(offset)
        if record.name == METADATA_VERSION:
            if record.HasField("mod_offset"):  # a snapshot's: where it was reached
                self._mod_floor.set(record.mod_offset)
            elif enabled(Feature.MOD_OFFSETS, record.feature_level) and not enabled(
                    Feature.MOD_OFFSETS, self.finalized_level(METADATA_VERSION)):
                self._mod_floor.set(offset)
        # Level 0 removes the feature (metadata.proto).
        if record.feature_level == 0:
            self._levels.pop(record.name, None)
        else:
            self._levels[record.name] = record.feature_level

    # -- queries -----------------------------------------------------------------------

    def finalized_level(self, name: str, epoch: int | None = None) -> int:
        """The finalized level of ``name``, 0 when not finalized."""
        return self._levels.get(name, 0, epoch=epoch)

    def mod_floor(self, epoch: int | None = None) -> int | None:
        """None below metadata.version 8 (no mod offsets, no conditional writes);
        else the offset older changes report as their mod offset."""
        if not enabled(Feature.MOD_OFFSETS, self.finalized_level(METADATA_VERSION, epoch)):
            return None
        return self._mod_floor.get(epoch)

    def lowered_at(self) -> int:
        """The offset of the last record that lowered a level (-1: none)."""
        return self._lowered_at.get()

    def finalized_levels(self, epoch: int | None = None) -> dict[str, int]:
        return dict(sorted(self._levels.items(epoch=epoch)))

    def describe(self, epoch: int | None = None) -> tuple[FeatureDescription, ...]:
        """Every supported feature (finalized level 0 when not set), plus any finalized
        feature this software does not know (supported range 0..0)."""
        levels = self.finalized_levels(epoch)
        names = sorted(set(levels) | set(SUPPORTED_FEATURES))
        return tuple(
            FeatureDescription(
                name=name,
                finalized_level=levels.get(name, 0),
                min_supported=SUPPORTED_FEATURES.get(name, (0, 0))[0],
                max_supported=SUPPORTED_FEATURES.get(name, (0, 0))[1],
            )
            for name in names
        )

    def snapshot_records(self, epoch: int | None = None) -> list[MetadataRecord]:
        floor = self.mod_floor(epoch)
        records = []
        for name, level in self.finalized_levels(epoch).items():
            record = FeatureLevelRecord(name=name, feature_level=level)
            if name == METADATA_VERSION and floor is not None:
                record.mod_offset = floor
            records.append(make_record(record))
        return records
