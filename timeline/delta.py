"""Delta types: what a snapshot keeps for one collection.

A snapshot taken at epoch ``e`` holds, per collection, the values that collection had
at ``e`` for exactly the keys written since ``e`` (and before the next snapshot was
taken).  The first write to a key after the newest snapshot saves the old value there;
later writes to the same key find it already saved (one dict lookup) and save nothing.

* maps and sets: a ``MapDelta`` — ``dict[key, old value]``; a key that did not exist
  at ``e`` is saved as ``ABSENT`` (for sets the value is simply ``True``/``False``,
  "was a member at e");
* scalars (``TimelineObject``, ``TimelineInteger``): the old value itself, stored
  directly under the collection's id in the snapshot.

The value of a key at epoch ``e`` is the value saved by the *oldest* live snapshot at
or after ``e`` that saved it, and the latest value if none did: a key saved in a newer
snapshot was untouched between ``e`` and that snapshot.  ``overlay`` merges a run of
deltas into exactly that view of the changed keys.

Not thread-safe, like the whole package.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, final


@final
class _Absent:
    """The type of ``ABSENT``: "this key did not exist at that epoch"."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()

# key -> value at the snapshot's epoch (or ABSENT). Values are typed `object` because
# ABSENT shares the slot with the collection's own values.
MapDelta = dict[Any, object]


def overlay(deltas_newest_first: Iterable[MapDelta | None]) -> MapDelta:
    """Merge deltas, newest snapshot first, into "key -> value at the oldest epoch".

    Applying newest-first lets the older (earlier-epoch) saved value overwrite the newer
    one, so the oldest snapshot wins, which is the rule above. Cost: O(entries).
    """
    merged: MapDelta = {}
    for delta in deltas_newest_first:
        if delta:
            merged.update(delta)
    return merged
