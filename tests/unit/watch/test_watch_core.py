"""Watch without a network: what a record is about, what a watch selects, the
hand-overs between tier, local log and live tail (a property test: every offset once,
in order, whatever the trims), and one watch's loop against a fake gRPC context
(start checks, progress, live follow, the slow watcher's cut-off)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any, NoReturn

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.api import admin_pb2 as apb
from controller.logformat import BatchOrigin, RecordBatch
from controller.records import encode_record, make_record
from controller.records import metadata_pb2 as pb
from controller.security.access import OPEN
from controller.watch.events import Kind, TopicNames, WatchSpec, changes_of
from controller.watch.history import HistoryReader, HistoryUnavailableError
from controller.watch.hub import WatchHub
from controller.watch.service import RESUME_OFFSET_KEY, WatchService, WatchSettings

ORIGIN = BatchOrigin("User:alice", "ipv4:127.0.0.1:1", "req-1")


def batch(base: int, *payloads: Any, time_ms: int = 1_000) -> RecordBatch:
    return RecordBatch(base, 3, time_ms, False, ORIGIN,
                       tuple(encode_record(make_record(p)) for p in payloads))


def topic(name: str, tid: str) -> pb.TopicRecord:
    return pb.TopicRecord(name=name, topic_id=tid)


def part(tid: str, index: int) -> pb.PartitionRecord:
    return pb.PartitionRecord(topic_id=tid, partition_id=index, replicas=[1], isr=[1])


# -- what a record is about, what a watch selects ----------------------------------


def test_each_record_says_what_it_is_about() -> None:
    changes = changes_of(batch(
        10, topic("orders", "T1"), part("T1", 0),
        pb.ConfigRecord(resource_type=pb.CONFIG_RESOURCE_TYPE_TOPIC, resource_name="orders",
                        name="retention.ms", value="1"),
        pb.ConfigRecord(resource_type=pb.CONFIG_RESOURCE_TYPE_BROKER, resource_name="2",
                        name="x", value="1"),
        pb.RegisterBrokerRecord(broker_id=4, broker_epoch=7),
        pb.AccessControlEntryRecord(id="a", resource_type=pb.ACL_RESOURCE_TYPE_TOPIC,
                                    resource_name="orders",
                                    pattern_type=pb.ACL_PATTERN_TYPE_PREFIXED),
        pb.FeatureLevelRecord(name="metadata.version", feature_level=7),
        pb.NoOpRecord()))
    got = [(c.offset, c.kind, c.record_type, c.topic_id, c.topic_name, c.partition,
            c.resource_name) for c in changes]
    assert got == [
        (10, Kind.TOPIC, "topic", "T1", "orders", -1, ""),
        (11, Kind.PARTITION, "partition", "T1", "", 0, ""),
        (12, Kind.CONFIG, "config", "", "orders", -1, ""),
        (13, Kind.CONFIG, "config", "", "", -1, "BROKER:2"),
        (14, Kind.BROKER, "register_broker", "", "", -1, "4"),
        (15, Kind.ACL, "access_control_entry", "", "", -1, "TOPIC:PREFIXED:orders"),
        (16, Kind.FEATURE, "feature_level", "", "", -1, "metadata.version"),
        (17, Kind.INTERNAL, "no_op", "", "", -1, ""),
    ]
    assert all(c.principal == "User:alice" and c.request_id == "req-1" for c in changes)


def select(spec: WatchSpec, batches: Sequence[RecordBatch], *, from_offset: int = 0,
           topics_allowed: frozenset[str] | None = None, cluster: bool = True,
           known: dict[str, str] | None = None) -> list[tuple[int, str, str]]:
    names = TopicNames((known or {}).get)
    out = []
    for b in batches:
        out += [(c.offset, c.record_type, name) for c, name in spec.select(
            changes_of(b), from_offset, names,
            lambda t: topics_allowed is None or t in topics_allowed, cluster)]
    return out


HISTORY = [
    batch(0, pb.RegisterBrokerRecord(broker_id=1)),
    batch(1, topic("orders", "T1"), part("T1", 0)),
    batch(3, topic("audit", "T2"), part("T2", 0)),
    batch(5, pb.PartitionChangeRecord(topic_id="T1", partition_id=0, leader=1)),
    batch(6, pb.RemoveTopicRecord(topic_id="T1")),
    batch(7, pb.PartitionChangeRecord(topic_id="T2", partition_id=0, leader=1),
          pb.NoOpRecord()),
]


def test_a_watch_selects_by_type_topic_prefix_and_permission() -> None:
    everything = select(WatchSpec(), HISTORY)
    assert [o for o, _, _ in everything] == [0, 1, 2, 3, 4, 5, 6, 7]  # no internal no_op
    # A removed topic's last records still carry its name.
    assert (6, "remove_topic", "orders") in everything
    assert select(WatchSpec(topic="orders"), HISTORY) == [
        (1, "topic", "orders"), (2, "partition", "orders"),
        (5, "partition_change", "orders"), (6, "remove_topic", "orders")]
    assert [o for o, _, _ in select(WatchSpec(topic_prefix="au"), HISTORY)] == [3, 4, 7]
    assert select(WatchSpec(frozenset({Kind.BROKER})), HISTORY) == [
        (0, "register_broker", "1")]
    assert select(WatchSpec(frozenset({Kind.INTERNAL})), HISTORY) == [(8, "no_op", "")]
    # Only what the caller may describe: one topic, no cluster-wide changes.
    assert [o for o, _, _ in select(WatchSpec(), HISTORY, topics_allowed=frozenset({"audit"}),
                                    cluster=False)] == [3, 4, 7]
    # Mid-history: names the watch never saw come from the controller's topics now.
    assert select(WatchSpec(topic="audit"), HISTORY, from_offset=5,
                  known={"T2": "audit"}) == [(7, "partition_change", "audit")]


# -- the hand-overs -------------------------------------------------------------------


class FakeLocalLog:
    def __init__(self, batches: Sequence[RecordBatch], start: int) -> None:
        self.batches = list(batches)
        self.start = start

    def local_start_offset(self) -> int:
        return self.start

    def read_committed_batches(self, from_offset: int, to_offset: int,
                               max_bytes: int) -> list[RecordBatch]:
        if from_offset < self.start:
            raise ValueError("trimmed")
        held = [b for b in self.batches if b.next_offset > from_offset
                and b.base_offset < to_offset and b.base_offset >= self.start]
        return held[:3]


class FakeTier:
    def __init__(self, objects: Sequence[Sequence[RecordBatch]]) -> None:
        self.objects = [list(o) for o in objects if o]

    async def start_offset(self) -> int | None:
        return min((o[0].base_offset for o in self.objects), default=None)

    async def read(self, from_offset: int) -> list[RecordBatch]:
        holding = [o for o in self.objects
                   if o[0].base_offset <= from_offset < o[-1].next_offset]
        if not holding:
            return []
        best = max(holding, key=lambda o: o[-1].next_offset)
        return [b for b in best if b.next_offset > from_offset]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_reading_hands_over_from_tier_to_local_log_with_no_gap_or_repeat(
        data: st.DataObject) -> None:
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=2, max_size=30))
    batches, offset = [], 0
    for size in sizes:
        batches.append(batch(offset, *[pb.NoOpRecord()] * size))
        offset += size
    end = offset
    n = len(batches)
    tier_batches = data.draw(st.integers(0, n))
    # Tier objects over batches [0, tier_batches), with overlapping copies.
    cuts = sorted(set(data.draw(st.lists(st.integers(0, tier_batches), max_size=6))))
    bounds = [0, *cuts, tier_batches]
    objects = [batches[a:b] for a, b in itertools.pairwise(bounds)]
    if tier_batches and data.draw(st.booleans()):
        a = data.draw(st.integers(0, tier_batches - 1))
        objects.append(batches[a:data.draw(st.integers(a + 1, tier_batches))])
    # The local log starts where the tier ends at the latest, and is trimmed between
    # reads (never past the tier's end: that would be a real gap).
    first_local = data.draw(st.integers(0, tier_batches)) if tier_batches < n else n
    local = FakeLocalLog(batches, batches[first_local].base_offset if first_local < n else end)
    reader = HistoryReader(local, FakeTier(objects) if tier_batches else None)

    async def read_all() -> list[int]:
        seen: list[int] = []
        next_offset = 0 if tier_batches else local.start
        while next_offset < end:
            got = await reader.read(next_offset, end)
            assert got and got[0].base_offset <= next_offset < got[0].next_offset
            for b in got:
                seen += [o for o in range(b.base_offset, b.next_offset) if o >= next_offset]
                next_offset = max(next_offset, b.next_offset)
            tier_end = batches[tier_batches - 1].next_offset if tier_batches else 0
            trim_to = data.draw(st.integers(local.start, max(local.start, tier_end)))
            if any(b.base_offset == trim_to for b in batches):
                local.start = trim_to
        return seen

    seen = asyncio.run(read_all())
    first = 0 if tier_batches else batches[first_local].base_offset if first_local < n else end
    assert seen == list(range(first, end))


def test_a_read_no_one_holds_names_the_offset() -> None:
    reader = HistoryReader(FakeLocalLog(HISTORY, 5), None)
    with pytest.raises(HistoryUnavailableError, match=r"offset 1: .*no tier is configured"):
        asyncio.run(reader.read(1, 9))


# -- one watch's loop -------------------------------------------------------------------


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str,
                 trailing: Sequence[tuple[str, str]]) -> None:
        super().__init__(details)
        self.code, self.details, self.trailing = code, details, dict(trailing)


class FakeContext:
    def __init__(self, stuck_after: int | None = None) -> None:
        self.responses: list[apb.WatchResponse] = []
        self.stuck_after = stuck_after

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5"

    def auth_context(self) -> dict[str, Any]:
        return {}

    async def write(self, response: bytes) -> None:
        if self.stuck_after is not None and len(self.responses) >= self.stuck_after:
            await asyncio.Event().wait()  # the watcher stopped reading
        self.responses.append(apb.WatchResponse.FromString(response))

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: Sequence[tuple[str, str]] = ()) -> NoReturn:
        raise Aborted(code, details, trailing_metadata)


class FakeNode:
    def __init__(self, active: bool = True) -> None:
        self.is_active = active

    def topic_name(self, topic_id: str) -> str | None:
        return None


def service(local: FakeLocalLog, *, active: bool = True, **settings: int
            ) -> WatchService:
    hub = WatchHub()
    hub.advance(local.batches[-1].next_offset if local.batches else 0)
    return WatchService(hub, HistoryReader(local, None), FakeNode(active), OPEN,
                        WatchSettings(**settings))


def request(**fields: Any) -> bytes:
    return apb.WatchRequest(**fields).SerializeToString()


def test_a_start_outside_the_history_is_refused_naming_it() -> None:
    local = FakeLocalLog(HISTORY, 3)
    with pytest.raises(Aborted) as below:
        asyncio.run(service(local).serve(request(from_offset=1), FakeContext()))
    assert below.value.code is grpc.StatusCode.OUT_OF_RANGE
    assert "below the oldest offset held, 3" in below.value.details
    with pytest.raises(Aborted) as beyond:
        asyncio.run(service(local, start_wait_ms=20).serve(request(from_offset=50),
                                                           FakeContext()))
    assert beyond.value.code is grpc.StatusCode.OUT_OF_RANGE
    assert "beyond the committed end 9" in beyond.value.details
    # A standby cannot tell "beyond the end" from "not heard of it yet": BEHIND.
    with pytest.raises(Aborted) as behind:
        asyncio.run(service(local, active=False, start_wait_ms=20).serve(
            request(from_offset=50), FakeContext()))
    assert behind.value.code is grpc.StatusCode.UNAVAILABLE
    assert behind.value.details.startswith("BEHIND")
    with pytest.raises(Aborted) as bad:
        asyncio.run(service(local).serve(request(topic="a", topic_prefix="b"), FakeContext()))
    assert bad.value.code is grpc.StatusCode.INVALID_ARGUMENT


def test_a_watch_delivers_history_then_follows_live_commits_then_ends_resumably() -> None:
    local = FakeLocalLog(HISTORY, 0)
    svc = service(local)
    context = FakeContext()

    async def run() -> None:
        watch = asyncio.create_task(svc.serve(request(from_offset=0, topic="audit",
                                                      progress_interval_ms=50), context))
        while not context.responses or context.responses[-1].next_offset < 9:
            await asyncio.sleep(0.01)
        local.batches.append(batch(9, pb.PartitionChangeRecord(topic_id="T2",
                                                                partition_id=0, leader=2)))
        local.batches.append(batch(10, pb.NoOpRecord()))
        svc.hub.advance(11)
        while context.responses[-1].next_offset < 11:
            await asyncio.sleep(0.01)
        svc.close()
        await watch

    with pytest.raises(Aborted) as ended:
        asyncio.run(run())
    assert ended.value.code is grpc.StatusCode.UNAVAILABLE
    assert ended.value.trailing[RESUME_OFFSET_KEY] == "11"
    offsets = [e.offset for r in context.responses for e in r.events]
    assert offsets == [3, 4, 7, 9]
    tokens = [r.next_offset for r in context.responses]
    assert tokens == sorted(tokens) and tokens[0] == 0
    assert all(r.next_offset <= r.committed_offset for r in context.responses)


def test_a_watcher_that_stops_reading_is_cut_off_with_its_last_token() -> None:
    many = [batch(i, topic(f"t{i}", f"id{i}")) for i in range(40)]
    svc = service(FakeLocalLog(many, 0), send_timeout_ms=50, max_events_per_response=5)
    context = FakeContext(stuck_after=3)
    with pytest.raises(Aborted) as ended:
        asyncio.run(svc.serve(request(from_offset=0), context))
    assert ended.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "WATCH_TOO_SLOW" in ended.value.details
    assert ended.value.trailing[RESUME_OFFSET_KEY] == str(context.responses[-1].next_offset)
    assert svc.hub.watchers == 0, "the watch let go of its slot"


def test_too_many_watchers_are_refused() -> None:
    svc = service(FakeLocalLog(HISTORY, 0), max_watchers=1)
    svc.hub.watchers = 1
    with pytest.raises(Aborted) as refused:
        asyncio.run(svc.serve(request(), FakeContext()))
    assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "TOO_MANY_WATCHERS" in refused.value.details
