"""Proposals appended by this node and awaiting their fate: committed, or lost.

A proposal made in epoch E at offsets [base, last] commits exactly when the
committed batch at `base` is the one we appended: same epoch and same last
offset (one leader per epoch, and a leader never rewrites its own epoch). If the
commit point passes `base` with another batch there, or a deposed leader's log
is cut below `last`, it never will.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Iterable

import attrs

from controller.logformat import RecordBatch


class ProposalLostError(Exception):
    """The proposal was appended but another leader's records replaced it: it did
    not commit and never will."""


@attrs.define(slots=True)
class _Proposal:
    base_offset: int
    last_offset: int
    epoch: int
    future: asyncio.Future[int]


class PendingProposals:
    def __init__(self) -> None:
        self._by_base: dict[int, list[_Proposal]] = {}
        # Base offsets, smallest first, to find proposals the commit point passed.
        # May hold stale entries (already resolved); they are skipped.
        self._heap: list[int] = []

    def __len__(self) -> int:
        return len(self._by_base)

    def add(self, base_offset: int, record_count: int, epoch: int,
            future: asyncio.Future[int]) -> None:
        assert record_count > 0
        if base_offset not in self._by_base:
            heapq.heappush(self._heap, base_offset)
        self._by_base.setdefault(base_offset, []).append(
            _Proposal(base_offset, base_offset + record_count - 1, epoch, future))

    def committed(self, batches: Iterable[RecordBatch], applied_offset: int) -> None:
        """`batches` just committed, in order; everything below `applied_offset` is."""
        for batch in batches:
            for p in self._by_base.pop(batch.base_offset, ()):
                if p.epoch == batch.epoch and p.last_offset == batch.last_offset:
                    _settle(p, result=p.last_offset)
                else:
                    _settle(p, lost="committed with another leader's records")
        while self._heap and self._heap[0] < applied_offset:
            for p in self._by_base.pop(heapq.heappop(self._heap), ()):
                _settle(p, lost="committed with another leader's records")

    def truncated(self, end_offset: int) -> None:
        """The log (of a node that no longer leads) now ends at `end_offset`: the
        leader that made us truncate holds nothing of ours there, and our epoch
        is over, so what lay beyond can never commit."""
        for base in [b for b, ps in self._by_base.items()
                     if any(p.last_offset >= end_offset for p in ps)]:
            keep = []
            for p in self._by_base.pop(base):
                if p.last_offset < end_offset:
                    keep.append(p)
                else:
                    _settle(p, lost="truncated after a leader change")
            if keep:
                self._by_base[base] = keep

    def fail_all(self, exc: BaseException) -> None:
        for ps in self._by_base.values():
            for p in ps:
                if not p.future.done():
                    p.future.set_exception(exc)
        self._by_base.clear()
        self._heap.clear()


def _settle(p: _Proposal, *, result: int | None = None, lost: str = "") -> None:
    if p.future.done():
        return  # the proposer gave up waiting
    if result is not None:
        p.future.set_result(result)
    else:
        p.future.set_exception(ProposalLostError(f"proposal at offset {p.base_offset}: {lost}"))
