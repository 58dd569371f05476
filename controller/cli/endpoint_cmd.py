"""`metakraft endpoint health|status`: each controller asked on its own (etcdctl
endpoint health / status): is it up, whom does it follow, how far has it got.

The endpoints are the --bootstrap addresses, or with --cluster every voter the quorum
lists (asked of the bootstrap addresses first). Each is asked directly and in
parallel, never redirected to the leader: the point is to see each one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import attrs
import click

from controller.api.client import AdminClient, AdminClientError
from controller.api.seam import NodeDescription, ReadConsistency
from controller.cli.admin_output import (
    EXIT_ITEM_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    AdminOptions,
    admin_options,
    console,
    emit_json,
    human_bytes,
    table,
)
from controller.rpc import health_statuses

# One endpoint gets at most this long (or --timeout-ms, if shorter): a dead one must
# not hold the report up for the admin client's whole default timeout.
ENDPOINT_TIMEOUT_MS = 3_000
# grpc.health.v1 service SERVING only on the active controller (the daemon's).
ACTIVE_CONTROLLER_SERVICE = "metakraft.ActiveController"


@attrs.frozen
class EndpointReport:
    endpoint: str
    healthy: bool
    took_ms: int
    # Why it is not healthy ("" when it is).
    problem: str = ""
    # The whole-server and active-controller health statuses (grpc.health.v1).
    health: str = ""
    active_health: str = ""
    node: NodeDescription | None = None


def ask(endpoint: str, opts: AdminOptions) -> EndpointReport:
    """One endpoint's health and state (never raises)."""
    timeout_ms = min(opts.timeout_ms, ENDPOINT_TIMEOUT_MS)
    started = time.monotonic()
    healths = health_statuses(endpoint, opts.tls, ["", ACTIVE_CONTROLLER_SERVICE], timeout_ms)
    health, active = healths[""], healths[ACTIVE_CONTROLLER_SERVICE]
    if health == "UNREACHABLE":
        return EndpointReport(endpoint, False, _since(started), "unreachable", health)
    try:
        with AdminClient([endpoint], timeout_ms=timeout_ms, tls=opts.tls,
                         consistency=ReadConsistency.STALE) as client:
            node = client.describe_node()
    except AdminClientError as exc:
        return EndpointReport(endpoint, False, _since(started), str(exc), health)
    took_ms = _since(started)
    problem = ""
    if health != "SERVING":
        problem = f"health {health}"
    elif node.leader_id < 0:
        problem = "knows no leader"
    elif node.repair_to_offset >= 0:
        problem = f"repairing its log (to offset {node.repair_to_offset})"
    return EndpointReport(endpoint, not problem, took_ms, problem, health, active, node)


def _since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def endpoints_of(opts: AdminOptions, cluster: bool) -> list[str]:
    """The bootstrap addresses, or (--cluster) every voter's address."""
    if not cluster:
        return list(opts.bootstrap)
    with AdminClient(opts.bootstrap, timeout_ms=opts.timeout_ms, tls=opts.tls,
                     consistency=ReadConsistency.STALE) as client:
        quorum = client.describe_quorum()
    found = [v.endpoint for v in quorum.voters if v.endpoint]
    if len(found) < len(quorum.voters):
        missing = [v.replica_id for v in quorum.voters if not v.endpoint]
        click.echo(f"warning: no address known for voters {missing}", err=True)
    return found


def ask_all(opts: AdminOptions, cluster: bool) -> list[EndpointReport] | None:
    try:
        endpoints = endpoints_of(opts, cluster)
    except AdminClientError as exc:
        click.echo(f"error: cannot list the voters: {exc}", err=True)
        return None
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(endpoints)))) as pool:
        return list(pool.map(lambda e: ask(e, opts), endpoints))


@click.group()
def endpoint() -> None:
    """Each controller on its own: health and status (etcdctl endpoint)."""


_CLUSTER = click.option("--cluster", is_flag=True,
                        help="Every voter of the quorum, not only the --bootstrap addresses.")


@endpoint.command("health")
@_CLUSTER
@admin_options
def endpoint_health(opts: AdminOptions, cluster: bool) -> None:
    """Whether each controller is up, serving and following a leader. Exit 1 if any
    is not."""
    reports = ask_all(opts, cluster)
    if reports is None:
        raise SystemExit(EXIT_UNREACHABLE)
    if opts.json:
        emit_json([{"endpoint": r.endpoint, "healthy": r.healthy, "took_ms": r.took_ms,
                    "problem": r.problem} for r in reports])
    for r in reports if not opts.json else ():
        if r.healthy:
            click.echo(f"{r.endpoint} is healthy: took {r.took_ms} ms")
        else:
            click.echo(f"{r.endpoint} is unhealthy: {r.problem}", err=True)
    raise SystemExit(EXIT_OK if all(r.healthy for r in reports) else EXIT_ITEM_FAILED)


@endpoint.command("status")
@_CLUSTER
@admin_options
def endpoint_status(opts: AdminOptions, cluster: bool) -> None:
    """Each controller's id, Raft role, controller mode, leader, epoch, offsets,
    lag, data size and versions. Exit 1 if any could not be asked."""
    reports = ask_all(opts, cluster)
    if reports is None:
        raise SystemExit(EXIT_UNREACHABLE)
    if opts.json:
        emit_json(reports)
    else:
        console().print(status_table(reports))
        for r in reports:
            if r.node is None:
                click.echo(f"error: {r.endpoint}: {r.problem}", err=True)
    raise SystemExit(EXIT_OK if all(r.node is not None for r in reports) else EXIT_ITEM_FAILED)


def status_table(reports: Sequence[EndpointReport]) -> object:
    columns = ("endpoint", "id", "role", "mode", "leader", "epoch", "high watermark",
               "applied", "lag", "log start", "log end", "data size", "version",
               "metadata.version")
    rows: list[tuple[object, ...]] = []
    for r in reports:
        n = r.node
        if n is None:
            rows.append((r.endpoint, "?", "unreachable", *("",) * (len(columns) - 3)))
            continue
        rows.append((
            r.endpoint, n.node_id, n.role + ("" if n.voter else " (observer)"),
            n.controller_mode, n.leader_id if n.leader_id >= 0 else "none", n.leader_epoch,
            n.high_watermark, n.applied_offset, max(0, n.high_watermark - n.applied_offset),
            n.log_start_offset, n.log_end_offset, human_bytes(n.data_dir_bytes),
            n.software_version,
            f"{n.finalized_metadata_version} ({n.min_supported_version}-"
            f"{n.max_supported_version})"))
    return table("Endpoints", columns, rows)

