"""The replicated table of recent admin writes: bounded by count and age, by replay
alone (every controller evicts the same entries), kept in snapshots, reverted with
the timeline."""

from __future__ import annotations

import random

from controller.metadata import MetadataState
from controller.metadata.requests import MAX_RESPONSE_BYTES, RequestControlManager
from controller.records import decode_record, encode_record
from timeline import SnapshotRegistry


def _state() -> MetadataState:
    return MetadataState(cluster_id="c", rng=random.Random(0))


def _remember(state: MetadataState, offset: int, rid: str, time_ms: int,
              response: bytes = b"ok") -> None:
    record = state.requests.result_record("User:a", rid, "create_topics", time_ms, response)
    state.replay(record, offset)


def test_a_remembered_write_is_found_by_principal_and_request_id() -> None:
    state = _state()
    _remember(state, 0, "r1", 1_000, b"answer")
    found = state.requests.lookup("User:a", "r1")
    assert found is not None and found.response == b"answer" and found.offset == 0
    assert found.method == "create_topics" and not found.result_dropped
    assert state.requests.lookup("User:b", "r1") is None  # another principal's id
    assert state.requests.lookup("User:a", "r2") is None


def test_entries_older_than_the_retention_go_as_newer_ones_replay() -> None:
    registry = SnapshotRegistry()
    table = RequestControlManager(registry, max_entries=100, retention_ms=1_000)
    for i, time_ms in enumerate((0, 500, 1_200, 1_600)):
        record = table.result_record("p", f"r{i}", "m", time_ms, b"")
        table.replay(record.request_result, i)
    # 1,600 - 1,000 = 600: r0 (0) and r1 (500) are out of the window.
    assert [key[1] for key, _ in table.entries()] == ["r2", "r3"]


def test_the_count_bound_drops_the_oldest() -> None:
    table = RequestControlManager(SnapshotRegistry(), max_entries=3, retention_ms=10**9)
    for i in range(5):
        table.replay(table.result_record("p", f"r{i}", "m", i, b"").request_result, i)
    assert [key[1] for key, _ in table.entries()] == ["r2", "r3", "r4"]
    assert table.size() == 3


def test_the_answers_kept_stay_within_their_byte_bound() -> None:
    table = RequestControlManager(SnapshotRegistry(), max_entries=100, retention_ms=10**9,
                                  max_total_bytes=1_000)
    for i in range(10):
        table.replay(table.result_record("p", f"r{i}", "m", i, b"x" * 300).request_result, i)
    assert table.total_bytes() <= 1_000
    assert [key[1] for key, _ in table.entries()] == ["r7", "r8", "r9"]


def test_an_answer_too_large_to_keep_is_marked_dropped() -> None:
    record = RequestControlManager.result_record("p", "r", "m", 0,
                                                 b"x" * (MAX_RESPONSE_BYTES + 1))
    assert record.request_result.result_dropped and record.request_result.response == b""


def test_the_table_survives_a_snapshot_and_reverts_with_the_timeline() -> None:
    state = _state()
    _remember(state, 0, "r1", 1_000)
    state.registry.create_snapshot(0)
    _remember(state, 1, "r2", 2_000)
    # A snapshot's records replay into an equal table (all at the snapshot's offset).
    copy = _state()
    copy.replay_encoded([encode_record(r) for r in state.snapshot_records()], 1, step=0)
    assert copy.to_image() == state.to_image()
    assert [k[1] for k, _ in copy.requests.entries()] == ["r1", "r2"]
    # Leadership lost: the uncommitted entry goes with the rest.
    state.revert_to_committed(0)
    assert state.requests.lookup("User:a", "r2") is None
    assert state.requests.lookup("User:a", "r1") is not None


def test_a_result_record_round_trips_through_the_codec() -> None:
    record = RequestControlManager.result_record("User:a", "r", "delete_topics", 7, b"\x01\x02")
    assert decode_record(encode_record(record)) == record
