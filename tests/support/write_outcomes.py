"""Writes under faults, judged from outside: what one CreateTopics came to, as its
client saw it, and whether the topics that exist afterwards agree with every answer
(acknowledged: exists; refused as not applied: does not; unknown: either)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from controller.api.client import (
    AdminClient,
    ControllerOverloadedError,
    ControllerUnreachableError,
    OutcomeUnknownError,
)
from controller.metadata import CreatableTopic


def create_outcome(admin: AdminClient, name: str) -> str:
    """"ok", "error:<CODE>", "unknown" (maybe applied) or "not_applied"."""
    try:
        result = admin.create_topics([CreatableTopic(name, 1, 3)])[0]
    except OutcomeUnknownError:
        return "unknown"
    except (ControllerUnreachableError, ControllerOverloadedError):
        return "not_applied"
    return "ok" if result.error.ok else f"error:{result.error.code.value}"


def check_outcomes(outcomes: Mapping[str, str], existing: set[str]) -> Counter[str]:
    """Every answer agrees with the topics that exist; the outcomes counted."""
    counts = Counter(outcomes.values())
    for name, outcome in outcomes.items():
        if outcome == "ok":
            assert name in existing, f"{name} acknowledged but lost"
        elif outcome == "not_applied":
            assert name not in existing, f"{name} reported not applied but exists"
        elif outcome != "unknown":
            # TOPIC_ALREADY_EXISTS here would mean a retry of an applied write.
            raise AssertionError(f"{name}: unexpected outcome {outcome} ({counts})")
    return counts
