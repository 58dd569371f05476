"""Feature manager: bootstrap, upgrade, explicit-only downgrade, describe."""

from __future__ import annotations

from controller.metadata import (
    LATEST_METADATA_VERSION,
    METADATA_VERSION,
    BrokerRegistrationRequest,
    ErrorCode,
    FeatureControlManager,
    FeatureUpdate,
    UpgradeType,
)
from controller.metadata.errors import ControllerResult
from controller.records import RequestResultRecord, make_record
from controller.records.domain import FeatureRange, Listener
from tests.unit.metadata.support import CLUSTER_ID, Harness


def test_bootstrap_at_latest_level() -> None:
    h = Harness()
    assert h.state.features.finalized_level(METADATA_VERSION) == LATEST_METADATA_VERSION
    (desc,) = h.state.features.describe()
    assert (desc.name, desc.finalized_level, desc.min_supported, desc.max_supported) == (
        METADATA_VERSION,
        LATEST_METADATA_VERSION,
        1,
        LATEST_METADATA_VERSION,
    )
    h.check()


def test_bootstrap_level_out_of_range() -> None:
    import pytest

    with pytest.raises(ValueError, match="outside"):
        FeatureControlManager.bootstrap_records(LATEST_METADATA_VERSION + 1)


def test_upgrade_and_refused_downgrades() -> None:
    h = Harness(bootstrap=False)
    h.apply(h.state.features.update_features([FeatureUpdate(METADATA_VERSION, 1)]))
    assert h.state.features.finalized_level(METADATA_VERSION) == 1
    up = h.state.features.update_features([FeatureUpdate(METADATA_VERSION, 2)])
    assert up.response[0].error.ok and len(up.records) == 1
    h.apply(up)
    down = h.state.features.update_features([FeatureUpdate(METADATA_VERSION, 1)])
    assert down.records == () and down.response[0].error.code is ErrorCode.INVALID_UPDATE_VERSION
    assert "UNSAFE_DOWNGRADE" in down.response[0].error.message
    unsafe = h.state.features.update_features(
        [FeatureUpdate(METADATA_VERSION, 1, UpgradeType.UNSAFE_DOWNGRADE)]
    )
    assert unsafe.response[0].error.ok
    h.apply(unsafe)
    assert h.state.features.finalized_level(METADATA_VERSION) == 1
    same = h.state.features.update_features([FeatureUpdate(METADATA_VERSION, 1)])
    assert same.records == () and same.response[0].error.ok
    h.check()


def test_bad_feature_updates() -> None:
    h = Harness()
    features = h.state.features
    for update in (
        FeatureUpdate("nope", 1),
        FeatureUpdate(METADATA_VERSION, LATEST_METADATA_VERSION + 1),
        FeatureUpdate(METADATA_VERSION, 0, UpgradeType.UNSAFE_DOWNGRADE),
    ):
        result = features.update_features([update])
        assert (
            result.records == ()
            and result.response[0].error.code is ErrorCode.INVALID_UPDATE_VERSION
        )
    dup = features.update_features([FeatureUpdate(METADATA_VERSION, 2)] * 2)
    assert dup.records == () and {r.error.code for r in dup.response} == {
        ErrorCode.DUPLICATE_RESOURCE
    }
    dry = features.update_features(
        [FeatureUpdate(METADATA_VERSION, 1, UpgradeType.UNSAFE_DOWNGRADE)], validate_only=True
    )
    assert dry.records == () and dry.response[0].error.ok


def test_upgrade_refused_when_a_broker_does_not_support_it() -> None:
    h = Harness(bootstrap=False)
    h.apply(h.state.features.update_features([FeatureUpdate(METADATA_VERSION, 1)]))
    request = BrokerRegistrationRequest(
        broker_id=1,
        incarnation_id="i",
        cluster_id=CLUSTER_ID,
        features=(FeatureRange(METADATA_VERSION, 1, 2),),
        listeners=(Listener("PLAINTEXT", "localhost", 9092, "PLAINTEXT"),),
    )
    h.apply(h.state.cluster.register_broker(request, next_offset=h.next_offset, now_ms=0))
    ok = h.state.features.update_features([FeatureUpdate(METADATA_VERSION, 2)])
    assert ok.response[0].error.ok
    refused = h.state.features.update_features([FeatureUpdate(METADATA_VERSION, 3)])
    assert refused.records == () and "broker 1" in refused.response[0].error.message


def test_an_upgrade_waits_for_every_controller_to_support_the_level() -> None:
    h = Harness(bootstrap=False)
    h.apply(h.state.features.update_features([FeatureUpdate(METADATA_VERSION, 3)]))
    target = [FeatureUpdate(METADATA_VERSION, LATEST_METADATA_VERSION)]
    full = (1, LATEST_METADATA_VERSION)
    # A controller of an older release says nothing: refused, naming it.
    unknown = h.state.features.update_features(target, controllers={1: full, 2: (0, 0)})
    assert unknown.records == () and "controller 2 has not said" in unknown.response[0].error.message
    old = h.state.features.update_features(target, controllers={1: full, 2: (1, 3)})
    assert old.records == () and "controller 2 supports metadata.version only in [1, 3]" in \
        old.response[0].error.message
    h.apply(h.state.features.update_features(target, controllers={1: full, 2: full}))
    assert h.state.features.finalized_level(METADATA_VERSION) == LATEST_METADATA_VERSION


def test_a_level_this_software_does_not_support_stops_replay_with_a_clear_message() -> None:
    import pytest

    from controller.metadata.features import UnsupportedFeatureLevelError
    from controller.records import FeatureLevelRecord

    h = Harness()
    record = FeatureLevelRecord(name=METADATA_VERSION, feature_level=LATEST_METADATA_VERSION + 1)
    with pytest.raises(UnsupportedFeatureLevelError, match="run a release that supports"):
        h.state.features.replay(record)
    assert h.state.features.finalized_level(METADATA_VERSION) == LATEST_METADATA_VERSION


def test_a_broker_that_does_not_say_its_range_holds_the_level_at_3() -> None:
    h = Harness(bootstrap=False)
    h.apply(h.state.features.update_features([FeatureUpdate(METADATA_VERSION, 3)]))
    h.register(1)  # registered without features: a release before 0.3.0
    refused = h.state.features.update_features([FeatureUpdate(METADATA_VERSION, 4)])
    assert refused.records == () and "broker 1 did not say" in refused.response[0].error.message
    # Levels it is known to read are fine.
    assert h.state.features.update_features(
        [FeatureUpdate(METADATA_VERSION, 3)]).response[0].error.ok


def test_a_safe_downgrade_passes_only_while_nothing_needs_the_higher_level() -> None:
    h = Harness()
    safe = [FeatureUpdate(METADATA_VERSION, 4, UpgradeType.SAFE_DOWNGRADE)]
    # Nothing of levels 5 and 6 is held: safe.
    result = h.state.features.update_features(safe, validate_only=True)
    assert result.response[0].error.ok, result.response
    # The request-result table (level 4) holds an entry: going below 4 is refused.
    h.apply(ControllerResult((make_record(RequestResultRecord(
        principal="User:a", request_id="r1", method="create_topics", time_ms=1)),), None))
    below = h.state.features.update_features(
        [FeatureUpdate(METADATA_VERSION, 3, UpgradeType.SAFE_DOWNGRADE)])
    message = below.response[0].error.message
    assert below.records == () and "request-result table holds 1 entries" in message
    assert "--unsafe" in message
    unsafe = h.state.features.update_features(
        [FeatureUpdate(METADATA_VERSION, 3, UpgradeType.UNSAFE_DOWNGRADE)])
    assert unsafe.response[0].error.ok


def test_after_an_unsafe_downgrade_snapshots_leave_out_what_the_level_cannot_keep() -> None:
    h = Harness()
    h.apply(ControllerResult((make_record(RequestResultRecord(
        principal="User:a", request_id="r1", method="create_topics", time_ms=1)),), None))

    def kinds() -> set[str | None]:
        return {r.WhichOneof("record") for r in h.state.snapshot_records()}

    assert "request_result" in kinds()
    h.apply(h.state.features.update_features(
        [FeatureUpdate(METADATA_VERSION, 3, UpgradeType.UNSAFE_DOWNGRADE)]))
    assert "request_result" not in kinds() and "feature_level" in kinds()
