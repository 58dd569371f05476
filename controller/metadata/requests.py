"""The replicated table of recent admin writes: what makes a retry exactly-once.

Every admin write that carries a request id appends, in the same batch as its
records, a `RequestResultRecord` naming (principal, request id, method, time) and the
answer the caller got, encoded. The batch commits or vanishes whole, so the table
says exactly which writes took effect. A retry with the same principal and request
id (after a lost answer, a leader change, a timeout) finds its entry and gets the
original answer, without doing the work again; a write still uncommitted is
answered when its batch commits.

Bounds, applied by replay alone so every controller evicts the same entries at the
same offsets (so they are constants of the record format, not settings a controller
could disagree on): entries older than `retention_ms` (measured against the newest
entry's time), the oldest beyond `max_entries`, and the oldest while the answers
kept exceed `MAX_TOTAL_RESPONSE_BYTES` go. An answer larger than
`MAX_RESPONSE_BYTES` is not kept (`result_dropped`): its retry learns that the write
was applied, not the per-item detail. A retry outside the window is a new request.
"""

from __future__ import annotations

import attrs

from controller.records import MetadataRecord, RequestResultRecord, make_record
from timeline import SnapshotRegistry, TimelineHashMap, TimelineLong, TimelineSortedMap

DEFAULT_MAX_ENTRIES = 20_000
DEFAULT_RETENTION_MS = 10 * 60 * 1000
# Answers above this are not kept (a 10,000-topic create answers ~0.5 MB).
MAX_RESPONSE_BYTES = 64 * 1024
# All answers kept, together: the table's memory bound (with the keys, ~2x this).
MAX_TOTAL_RESPONSE_BYTES = 32 * 1024 * 1024
# The request id and principal are clipped to this by the API layer (batch origin).
MAX_KEY_CHARS = 256

RequestKey = tuple[str, str]  # (principal, request id)


@attrs.frozen
class RequestOutcome:
    method: str
    time_ms: int
    # The log offset of the record: the write is committed once this is.
    offset: int
    response: bytes
    result_dropped: bool


class RequestControlManager:
    """Owns the table; generates its records, and replay is its only mutator."""

    def __init__(self, registry: SnapshotRegistry, *, max_entries: int = DEFAULT_MAX_ENTRIES,
                 retention_ms: int = DEFAULT_RETENTION_MS,
                 max_total_bytes: int = MAX_TOTAL_RESPONSE_BYTES) -> None:
        assert max_entries > 0 and retention_ms > 0 and max_total_bytes > 0
        self.max_entries = max_entries
        self.retention_ms = retention_ms
        self.max_total_bytes = max_total_bytes
        self._total_bytes = TimelineLong(registry, 0)
        self._outcomes: TimelineHashMap[RequestKey, RequestOutcome] = TimelineHashMap(registry)
        # (time, principal, request id): the eviction order.
        self._by_time: TimelineSortedMap[tuple[int, str, str], None] = TimelineSortedMap(registry)

    # -- reads ---------------------------------------------------------------------------

    def lookup(self, principal: str, request_id: str,
               epoch: int | None = None) -> RequestOutcome | None:
        return self._outcomes.get((principal, request_id), epoch=epoch)

    def size(self, epoch: int | None = None) -> int:
        return self._outcomes.size(epoch)

    def entries(self, epoch: int | None = None) -> tuple[tuple[RequestKey, RequestOutcome], ...]:
        """Every entry in eviction order (the state digest and snapshots)."""
        out = []
        for _time_ms, principal, request_id in self._by_time.keys(epoch):
            outcome = self._outcomes.get((principal, request_id), epoch=epoch)
            assert outcome is not None, "the two maps hold the same keys"
            out.append(((principal, request_id), outcome))
        return tuple(out)

    # -- generate ------------------------------------------------------------------------

    @staticmethod
    def result_record(principal: str, request_id: str, method: str, now_ms: int,
                      response: bytes) -> MetadataRecord:
        assert request_id, "only requests with an id are remembered"
        dropped = len(response) > MAX_RESPONSE_BYTES
        return make_record(RequestResultRecord(
            principal=principal[:MAX_KEY_CHARS], request_id=request_id[:MAX_KEY_CHARS],
            method=method, time_ms=now_ms, response=b"" if dropped else response,
            result_dropped=dropped))

    # -- replay --------------------------------------------------------------------------

    def replay(self, record: RequestResultRecord, offset: int) -> None:
        key = (record.principal, record.request_id)
        old = self._outcomes.get(key)
        if old is not None:
            # Only a snapshot replays an entry again (the generator never writes a
            # known key); keep one eviction slot per key.
            del self._by_time[(old.time_ms, *key)]
            self._total_bytes.set(self._total_bytes.get() - len(old.response))
        self._outcomes[key] = RequestOutcome(record.method, record.time_ms, offset,
                                             bytes(record.response), record.result_dropped)
        self._total_bytes.set(self._total_bytes.get() + len(record.response))
        self._by_time[(record.time_ms, *key)] = None
        self._evict(newest_ms=max(record.time_ms, self._newest_ms()))

    def _newest_ms(self) -> int:
        last = self._by_time.last_key()
        return -1 if last is None else last[0]

    def _evict(self, newest_ms: int) -> None:
        floor = newest_ms - self.retention_ms
        while True:
            first = self._by_time.first_key()
            if first is None:
                return
            if first[0] >= floor and len(self._outcomes) <= self.max_entries \
                    and self._total_bytes.get() <= self.max_total_bytes:
                return
            del self._by_time[first]
            gone = self._outcomes[(first[1], first[2])]
            del self._outcomes[(first[1], first[2])]
            self._total_bytes.set(self._total_bytes.get() - len(gone.response))

    def total_bytes(self, epoch: int | None = None) -> int:
        return self._total_bytes.get(epoch)

    def snapshot_records(self, epoch: int | None = None) -> list[MetadataRecord]:
        return [make_record(RequestResultRecord(
            principal=p, request_id=r, method=o.method, time_ms=o.time_ms,
            response=o.response, result_dropped=o.result_dropped))
            for (p, r), o in self.entries(epoch)]
