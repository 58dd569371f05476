"""The real controller behind the Admin API, without Raft: for the API tests.

`InMemoryController` is the daemon's own stack -- `ControllerApi` over a
`QuorumController` driving the `ControllerMachine` -- on a one-node in-memory quorum
that commits every batch on the next loop turn (`FakeQuorum`, auto-commit). So the
services, the client and the CLI are tested against the code that runs in
production, not a re-implementation. No idle no-ops and a long broker session, so
the log grows only by what a test does.

Test hooks, applied at the facade (before the controller sees a call):
`fail_next(exc)` makes the next call raise `exc` (`fail_always` every call);
`hold` / `release` stall calls; `calls` lists the calls (an Admin RPC's name, or
the facade method: register_broker ...); `batches`
is the log (each batch with its origin and decoded records); `record_count` its
length in records (a request that failed must leave it unchanged).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import random
import time
from collections.abc import Callable
from typing import Any

import attrs

from controller.api.seam import Origin
from controller.quorum_controller.controller import QuorumController
from controller.quorum_controller.events import Mode
from controller.quorum_controller.facade import ControllerApi
from controller.quorum_controller.ports import ControllerSettings
from controller.records import MetadataRecord, decode_record
from tests.support.controller_fake_quorum import FakeQuorum

# A controller id of its own: brokers take small ids (1, 2, 3 in the tests).
NODE_ID = 3000
# Calls the hooks leave alone: not requests.
_PLAIN = frozenset({"cluster_id", "check_serves"})


@attrs.frozen
class LoggedBatch:
    base_offset: int
    origin: Origin
    records: tuple[MetadataRecord, ...]


class InMemoryController:
    node_id = NODE_ID

    def __init__(self, *, cluster_id: str = "local-cluster", seed: int = 0) -> None:
        self._cluster_id = cluster_id
        self._seed = seed
        self.calls: list[str] = []
        # deque: the test thread appends while the server's loop thread pops.
        self._faults: collections.deque[BaseException] = collections.deque()
        self.standing_fault: BaseException | None = None
        self._lock: asyncio.Lock | None = None
        self.quorum: FakeQuorum | None = None
        self.controller: QuorumController | None = None
        self._api: ControllerApi | None = None

    async def open(self) -> None:
        """Build and start the stack on the running loop (the API server's); return
        once the controller is active."""
        if self._api is not None:
            return
        self.quorum = FakeQuorum([NODE_ID])
        node = self.quorum.nodes[NODE_ID]
        settings = ControllerSettings(
            node_id=NODE_ID, cluster_id=self._cluster_id, voter_addresses={NODE_ID: "local:1"},
            session_timeout_ms=3_600_000, metadata_max_idle_interval_ms=0)
        self.controller = QuorumController(settings, clock_ms=lambda: int(time.time() * 1000),
                                           rng=random.Random(self._seed))
        self.controller.attach(node)
        node.listener = self.controller
        self.controller.start()
        self._api = ControllerApi(self.controller, node)
        self.quorum.elect(NODE_ID)
        for _ in range(1000):
            if self.controller.mode is Mode.ACTIVE and self.controller.state.features \
                    .finalized_levels():
                return
            await asyncio.sleep(0.001)
        raise AssertionError("the in-memory controller did not become active")

    # -- test hooks --------------------------------------------------------------------

    def fail_next(self, exc: BaseException, times: int = 1) -> None:
        self._faults.extend([exc] * times)

    def fail_always(self, exc: BaseException | None) -> None:
        self.standing_fault = exc

    async def hold(self) -> None:
        """Every later call waits, after it is counted in `calls`, until `release`
        (both run on the server's loop: `ApiServer.run`)."""
        await self._call_lock().acquire()

    async def release(self) -> None:
        self._call_lock().release()

    def _call_lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    @property
    def state(self) -> Any:
        assert self.controller is not None, "not opened (serve it first)"
        return self.controller.state

    @property
    def record_count(self) -> int:
        assert self.quorum is not None, "not opened (serve it first)"
        return self.quorum.end_offset

    @property
    def batches(self) -> list[LoggedBatch]:
        assert self.quorum is not None, "not opened (serve it first)"
        return [LoggedBatch(b.base_offset, Origin(b.origin.principal, b.origin.client_address,
                                                  b.origin.request_id),
                            tuple(decode_record(r) for r in b.records))
                for b in self.quorum.log if not b.is_control]

    # -- the facade: the real one, behind the hooks ------------------------------------

    def __getattr__(self, name: str) -> Any:
        api = self.__dict__.get("_api")
        if api is None:
            raise AttributeError(f"{name}: the in-memory controller is not opened yet")
        target = getattr(api, name)
        if name in _PLAIN or not callable(target):
            return target
        return self._hooked(name, target)

    def _hooked(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            # The generic paths are named by their operation (CreateTopics ...).
            self.calls.append(args[0].name if name in ("write", "read") else name)
            fault = self._faults.popleft() if self._faults else self.standing_fault
            if fault is not None:
                raise fault
            async with self._call_lock():
                return await method(*args, **kwargs)
        return call
