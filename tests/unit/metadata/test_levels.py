"""The metadata.version table: every record type has a level; writers obey it."""

from __future__ import annotations

from controller.metadata.features import SUPPORTED_FEATURES
from controller.metadata.levels import (
    LATEST_METADATA_VERSION,
    LEVELS,
    Feature,
    check_table,
    enabled,
    min_level,
    needs_level,
)
from controller.records import RECORD_TYPES


def test_every_record_type_the_codec_knows_has_one_level() -> None:
    # Fails when a record type is added to the registry without a level.
    check_table()
    assert min_level("topic") == 1 and min_level("request_result") == 4
    assert SUPPORTED_FEATURES["metadata.version"] == (1, LATEST_METADATA_VERSION)
    assert {f.level for f in Feature} <= {level.level for level in LEVELS}
    assert "voters" in RECORD_TYPES  # kraft.version's, not in the table


def test_features_turn_on_at_their_level_and_say_how_to_get_there() -> None:
    assert not enabled(Feature.REMOTE_TIER, 4) and enabled(Feature.REMOTE_TIER, 5)
    message = needs_level(Feature.REMOTE_TIER, 3)
    assert "metadata.version 5" in message and "at 3" in message
    assert "features upgrade --metadata-version 5" in message
