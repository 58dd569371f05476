"""Admin calls straight to a facade, as the Admin service makes them (the RPC's row,
its generic write or read path) without the wire or authorization: for the
controller's tests. `AdminCalls(facade).create_topics([topic], validate_only=False,
origin=ORIGIN)` runs CreateTopics; any RPC by its snake_case name; the facade's own
methods (register_broker, describe_quorum, ...) pass through."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from controller.api import rpcs
from controller.api.seam import Args, ControllerFacade, Origin

_BY_SNAKE_NAME = {rpc.op.stored_name: rpc for rpc in rpcs.ADMIN_RPCS if rpc.op is not None}


class AdminCalls:
    def __init__(self, facade: ControllerFacade) -> None:
        self.facade = facade

    def __getattr__(self, name: str) -> Any:
        rpc = _BY_SNAKE_NAME.get(name)
        if rpc is None:
            return getattr(self.facade, name)

        async def call(items: Iterable[Any] | None = (), *, origin: Origin,
                       validate_only: bool = False, extra: Any = None) -> Any:
            args = Args(None if items is None else tuple(items), validate_only, extra)
            return await rpcs.run(rpc, self.facade, args, origin)

        return call
