"""`StateContext`: the `OpContext` of a bare `MetadataState`, for tests and the
simulation that drive the controller's machine without a facade or a quorum (a
static quorum, no leader view)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from controller.metadata import MetadataState


@attrs.frozen
class StateContext:
    state: MetadataState
    leader_id: int | None = None

    @property
    def cluster_id(self) -> str:
        return self.state.cluster.cluster_id

    def active_controller_id(self) -> int | None:
        return self.leader_id

    def quorum_is_dynamic(self) -> bool:
        return False

    def voter_versions(self) -> Mapping[int, tuple[int, int]] | None:
        return None
