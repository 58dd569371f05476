"""`DriverConfig`: everything a `RaftDriver` needs to run one node.

Default timeouts, chosen for a busy 2-core machine running three nodes plus load
generators (measured in docs/benchmarks.md): the leader answers a caught-up
follower's parked fetch at least every `fetch_max_wait_ms` (150 ms) and a
follower waits a random 400-800 ms (`election_timeout_ms` and up to twice it)
without news before it runs, so an event loop may stall for ~250 ms (GC, a slow
fsync, the scheduler) without an election; 45 s of saturating load with other
jobs on the machine caused none. A crashed leader is replaced within about one
election timeout plus two round trips (pre-vote, vote): 0.43-0.84 s measured
from kill -9 to the next commit. A planned stop (EndQuorumEpoch) hands over in
milliseconds. `request_timeout_ms` (300) must stay below the election timeout
(RaftConfig checks it) so a lost fetch is retried before the leader is given up.
RaftConfig's own default election timeout (1000 ms) would put failover at 1-2 s.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import attrs

from controller.raft.config import RaftConfig
from controller.rpc import RpcLimits
from controller.security.tls import TlsCredentials
from controller.storage.log import LogConfig


def _frozen_addresses(value: Mapping[int, str]) -> Mapping[int, str]:
    return MappingProxyType(dict(value))


def parse_voters(text: str) -> dict[int, str]:
    """`1=127.0.0.1:9001,2=127.0.0.1:9002` -> {1: "127.0.0.1:9001", ...}."""
    out: dict[int, str] = {}
    for part in text.split(","):
        node, sep, address = part.strip().partition("=")
        if not sep or not node.strip().isdigit() or ":" not in address:
            raise ValueError(f"bad voter {part!r}: expected ID=HOST:PORT")
        if int(node) in out:
            raise ValueError(f"voter {node} listed twice")
        out[int(node)] = address.strip()
    if not out:
        raise ValueError("no voters")
    return out


@attrs.frozen(kw_only=True)
class DriverConfig:
    node_id: int
    cluster_id: str
    # Voter id -> host:port of its Raft service. A node not listed is an observer.
    voter_addresses: Mapping[int, str] = attrs.field(converter=_frozen_addresses)
    data_dir: Path = attrs.field(converter=Path)

    # Raft timing (see the module docstring for why these values).
    election_timeout_ms: int = 400
    fetch_max_wait_ms: int = 150
    request_timeout_ms: int = 300
    check_quorum_timeout_ms: int = 1000

    # Bounds: events waiting for the node task, events handled per Ready (so a
    # flood of proposals still gets its fsync and replies out regularly), calls
    # in flight to one peer, proposals awaiting commit.
    max_inbox_events: int = 10_000
    max_events_per_ready: int = 512
    # ... and handled for at most about this long before the Ready is processed; a node
    # task busy for this long also pauses the loop (`RaftDriver._let_others_run`).
    max_events_time_ms: int = 20
    max_inflight_per_peer: int = 32
    max_pending_proposals: int = 20_000
    propose_timeout_ms: int = 30_000
    # How long a handler waits for the core beyond the request's own wait.
    reply_slack_ms: int = 1000
    # How long a resigning leader waits for EndQuorumEpoch answers on stop.
    resign_wait_ms: int = 500

    rpc_limits: RpcLimits = attrs.field(factory=RpcLimits)
    # Mutual TLS for the calls to peers (None: plaintext).
    tls: TlsCredentials | None = None
    log_config: LogConfig = attrs.field(factory=LogConfig)
    # A remote tier holds the log's history: local segments below the snapshot are
    # deleted only once the tier and local retention allow (see controller/tier).
    tiered: bool = False
    # Damage to flushed log records found on start: "repair" or "refuse" (log_adapter).
    on_log_damage: str = "repair"
    # The metadata.version range this software supports, sent with every fetch.
    supported_versions: tuple[int, int] = (0, 0)

    def __attrs_post_init__(self) -> None:
        if not self.voter_addresses:
            raise ValueError("at least one voter is required")
        for name in ("max_inbox_events", "max_events_per_ready",
                     "max_events_time_ms",
                     "max_inflight_per_peer", "max_pending_proposals", "propose_timeout_ms",
                     "reply_slack_ms", "resign_wait_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        self.raft_config()  # validates the timeouts against each other

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voter_addresses

    def raft_config(self, directory_id: str = "") -> RaftConfig:
        return RaftConfig(
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            directory_id=directory_id,
            voters=frozenset(self.voter_addresses),
            election_timeout_ms=self.election_timeout_ms,
            fetch_max_wait_ms=self.fetch_max_wait_ms,
            request_timeout_ms=self.request_timeout_ms,
            check_quorum_timeout_ms=self.check_quorum_timeout_ms,
            supported_versions=self.supported_versions,
        )
