"""`metakraft cluster|quorum|features|brokers`: cluster-level admin commands (the
topic-level ones are in ``admin_cmds``, which registers both)."""

from __future__ import annotations

import time

import click

from controller import __version__
from controller.api.client import AdminClient
from controller.api.seam import (
    QuorumDescription,
    ReadConsistency,
    ReplicaState,
    VoterChangeOutcome,
)
from controller.cli.admin_output import (
    EXIT_ITEM_FAILED,
    EXIT_OK,
    AdminOptions,
    admin_options,
    console,
    emit_json,
    ids,
    key_value,
    report,
    run_admin,
    status,
    table,
)
from controller.metadata import FeatureUpdate
from controller.metadata.features import METADATA_VERSION, UpgradeType


@click.group()
def cluster() -> None:
    """The cluster and its brokers."""


@cluster.command("describe")
@admin_options
def cluster_describe(opts: AdminOptions) -> None:
    """Cluster id, active controller, registered brokers."""

    def action(client: AdminClient) -> int:
        desc = client.describe_cluster()
        if opts.json:
            emit_json(desc)
            return EXIT_OK
        click.echo(f"cluster id: {desc.cluster_id}\nactive controller: {desc.controller_id}")
        rows = [
            (
                b.broker_id,
                b.broker_epoch,
                b.rack or "",
                "fenced" if b.fenced else "shutting down" if b.in_controlled_shutdown else "active",
                " ".join(f"{li.name}://{li.host}:{li.port}" for li in b.listeners),
            )
            for b in desc.brokers
        ]
        console().print(table("Brokers", ("id", "epoch", "rack", "state", "listeners"), rows))
        return EXIT_OK

    run_admin(opts, action)


@click.group()
def quorum() -> None:
    """The controller quorum (Raft)."""


@quorum.command("describe")
@click.option(
    "--replication", is_flag=True, help="One row per voter and observer: log end offset and lag."
)
@click.option(
    "--status", "status_only", is_flag=True,
    help="The summary (the default view; kafka-metadata-quorum's name for it): cluster id, "
    "leader, epoch, high watermark, max follower lag in offsets and in ms, voters, "
    "observers.")
@admin_options
def quorum_describe(opts: AdminOptions, replication: bool, status_only: bool) -> None:
    """Leader, epoch, high watermark and follower lag (with --replication: each
    replica's progress)."""
    if replication and status_only:
        raise click.UsageError("--status and --replication are two views; pick one")

    def action(client: AdminClient) -> int:
        desc = client.describe_quorum()
        if opts.json:
            emit_json(desc)
            return EXIT_OK
        if not replication:
            lag, lag_ms = follower_lag(desc)
            rows = [
                ("cluster id", desc.cluster_id or "?"),
                ("leader id", desc.leader_id if desc.leader_id >= 0 else "none"),
                ("leader epoch", desc.leader_epoch),
                ("high watermark", desc.high_watermark),
                ("max follower lag", "?" if lag is None else lag),
                ("max follower lag (ms)", "?" if lag_ms is None else lag_ms),
                ("voters", "\n".join(_voter_label(v) for v in desc.voters)),
                ("observers", ids([o.replica_id for o in desc.observers])),
                ("voter set", "dynamic (in the log)" if desc.dynamic else "static (configured)"),
            ]
            console().print(table("Quorum", ("", ""), rows, header=False))
            return EXIT_OK
        rows2 = []
        # The timestamps are the leader's wall clock (unix ms): "ms ago" assumes our
        # clock agrees with it, which holds on one host and roughly under NTP.
        now_ms = int(time.time() * 1000)
        for role, states in (("voter", desc.voters), ("observer", desc.observers)):
            for s in states:
                kind = "leader" if s.replica_id == desc.leader_id else role
                known = s.log_end_offset >= 0
                rows2.append(
                    (
                        s.replica_id,
                        s.directory_id or "-",
                        kind,
                        s.log_end_offset if known else "?",
                        # The leader's log end may run ahead of the high watermark.
                        max(0, desc.high_watermark - s.log_end_offset) if known else "?",
                        _ms_ago(now_ms, s.last_fetch_timestamp_ms),
                        _ms_ago(now_ms, s.last_caught_up_timestamp_ms),
                    )
                )
        columns = (
            "replica",
            "directory id",
            "role",
            "log end offset",
            "lag",
            "last fetch (ms ago)",
            "last caught up (ms ago)",
        )
        console().print(table("Quorum replication", columns, rows2))
        return EXIT_OK

    run_admin(opts, action)


def follower_lag(desc: QuorumDescription) -> tuple[int | None, int | None]:
    """The largest lag of a voter behind the leader, in offsets (the leader's log end
    minus the voter's) and in ms (since the voter last reached the leader's log end,
    both times on the leader's clock), as kafka-metadata-quorum reports them. None:
    not known (answered by a controller that does not lead, or a voter not heard from)."""
    leader = next((v for v in desc.voters if v.replica_id == desc.leader_id), None)
    if leader is None or leader.last_caught_up_timestamp_ms < 0:
        return None, None
    followers = [v for v in desc.voters if v.replica_id != desc.leader_id]
    if not followers:
        return 0, 0
    if any(v.log_end_offset < 0 or v.last_caught_up_timestamp_ms < 0 for v in followers):
        return None, None
    lag = max(leader.log_end_offset - v.log_end_offset for v in followers)
    lag_ms = max(leader.last_caught_up_timestamp_ms - v.last_caught_up_timestamp_ms
                 for v in followers)
    return max(0, lag), max(0, lag_ms)


def _voter_label(state: ReplicaState) -> str:
    label = str(state.replica_id)
    if state.endpoint:
        label += f"@{state.endpoint}"
    return label + (f" ({state.directory_id})" if state.directory_id else "")


def _identity_of(opts: AdminOptions, address: str) -> QuorumDescription:
    """Ask the controller at `address` itself who it is (a stale read: it answers from
    what it has, as an observer too)."""
    with AdminClient([address], timeout_ms=opts.timeout_ms, tls=opts.tls,
                     consistency=ReadConsistency.STALE) as client:
        return client.describe_quorum()


def _voter_change_result(opts: AdminOptions, what: str, outcome: VoterChangeOutcome,
                         dry_run: bool) -> int:
    if opts.json:
        emit_json(outcome)
        return EXIT_OK if outcome.error.ok else EXIT_ITEM_FAILED
    if not outcome.error.ok:
        click.echo(f"error: {what}: {outcome.error}", err=True)
        return EXIT_ITEM_FAILED
    voters = ", ".join(_voter_label(v) for v in outcome.voters)
    if dry_run:
        click.echo(f"{what}: would be accepted; the voters would be: {voters}")
    else:
        click.echo(f"{what}: done (voter set at offset {outcome.offset}); voters: {voters}")
    return EXIT_OK


@quorum.command("add-controller")
@click.option("--controller", "address", required=True, metavar="HOST:PORT",
              help="The controller to add: formatted with --no-initial-controllers, started, "
              "and fetching from the quorum (its id and directory id are read from it).")
@click.option("--dry-run", is_flag=True, help="Check only; change nothing.")
@admin_options
def quorum_add_controller(opts: AdminOptions, address: str, dry_run: bool) -> None:
    """Make a running controller a voter (KIP-853 AddVoter). The leader waits while it
    catches up, then until the change commits; one change at a time."""

    def action(client: AdminClient) -> int:
        me = _identity_of(opts, address)
        if not me.dynamic and not me.node_directory_id:
            click.echo(f"error: the controller at {address} has no directory id (formatted "
                       "for a static quorum); format it with --no-initial-controllers", err=True)
            return EXIT_ITEM_FAILED
        what = f"add controller {me.node_id} ({me.node_directory_id}) at {me.node_endpoint}"
        outcome = client.add_raft_voter(me.node_id, me.node_directory_id, me.node_endpoint,
                                        validate_only=dry_run)
        return _voter_change_result(opts, what, outcome, dry_run)

    run_admin(opts, action)


@quorum.command("remove-controller")
@click.option("--id", "node_id", required=True, type=click.IntRange(min=0),
              help="The voter's node id.")
@click.option("--directory-id", required=True,
              help="The voter's directory id (`quorum describe`): names the exact replica, "
              "so a reformatted disk under the same id is never removed by mistake.")
@click.option("--dry-run", is_flag=True, help="Check only; change nothing.")
@admin_options
def quorum_remove_controller(opts: AdminOptions, node_id: int, directory_id: str,
                             dry_run: bool) -> None:
    """Remove a voter (KIP-853 RemoveVoter). Removing the active controller: it leads
    until the change commits, then hands over."""

    def action(client: AdminClient) -> int:
        outcome = client.remove_raft_voter(node_id, directory_id, validate_only=dry_run)
        return _voter_change_result(opts, f"remove controller {node_id} ({directory_id})",
                                    outcome, dry_run)

    run_admin(opts, action)


@quorum.command("update-controller")
@click.option("--id", "node_id", required=True, type=click.IntRange(min=0))
@click.option("--directory-id", required=True)
@click.option("--endpoint", required=True, metavar="HOST:PORT",
              help="Where the voter serves now.")
@click.option("--dry-run", is_flag=True, help="Check only; change nothing.")
@admin_options
def quorum_update_controller(opts: AdminOptions, node_id: int, directory_id: str,
                             endpoint: str, dry_run: bool) -> None:
    """Record a voter's new endpoint (KIP-853 UpdateVoter)."""

    def action(client: AdminClient) -> int:
        outcome = client.update_raft_voter(node_id, directory_id, endpoint,
                                           validate_only=dry_run)
        return _voter_change_result(opts, f"update controller {node_id} to {endpoint}",
                                    outcome, dry_run)

    run_admin(opts, action)


@quorum.command("transfer-leadership")
@click.option("--to", "target_id", required=True, type=click.IntRange(min=0), metavar="ID",
              help="The voter to lead (its node id, as `quorum describe` lists it).")
@admin_options
def quorum_transfer_leadership(opts: AdminOptions, target_id: int) -> None:
    """Hand leadership to controller ID (etcdctl move-leader): the active controller
    stops appending, waits until ID holds its whole log, then steps down naming ID
    its successor, as on SIGTERM. Writes meanwhile are refused "not controller" and
    the clients retry them on ID; nothing acknowledged is lost."""

    def action(client: AdminClient) -> int:
        outcome = client.transfer_leadership(target_id)
        if opts.json:
            emit_json(outcome)
        elif outcome.error.ok:
            click.echo(f"controller {outcome.leader_id} leads (epoch {outcome.leader_epoch})")
        else:
            click.echo(f"error: {outcome.error}", err=True)
        return EXIT_OK if outcome.error.ok else EXIT_ITEM_FAILED

    run_admin(opts, action)


def _ms_ago(now_ms: int, timestamp_ms: int) -> int | str:
    """How long ago a leader timestamp was ("-": never, or unknown)."""
    return "-" if timestamp_ms < 0 else max(0, now_ms - timestamp_ms)


@click.group()
def features() -> None:
    """Finalized feature levels (metadata.version)."""


@features.command("describe")
@admin_options
def features_describe(opts: AdminOptions) -> None:
    """Each feature's finalized level, the range this controller supports, and the
    metadata.version range of every quorum member (controllers and brokers) as the
    active controller last heard it, with this release's version."""

    def action(client: AdminClient) -> int:
        found = client.describe_features()
        quorum = client.describe_quorum()
        members = [(role, s.replica_id, s.supported_versions)
                   for role, states in (("controller", quorum.voters),
                                        ("broker or observer", quorum.observers))
                   for s in states]
        if opts.json:
            emit_json({"release": __version__, "features": list(found),
                       "nodes": [{"node_id": i, "role": role,
                                  "metadata_version": None if v == (0, 0) else list(v)}
                                 for role, i, v in members]})
        else:
            rows = [
                (f.name, f.finalized_level, f"{f.min_supported}..{f.max_supported}") for f in found
            ]
            console().print(table(f"Features (this CLI: metakraft {__version__})",
                                  ("feature", "finalized level", "supported"), rows))
            console().print(table("metadata.version each node supports", ("node", "role",
                                                                           "supported"),
                                  [(i, role, "not said" if v == (0, 0) else f"{v[0]}..{v[1]}")
                                   for role, i, v in members]))
        return EXIT_OK

    run_admin(opts, action)


def _feature_updates(updates: tuple[str, ...], metadata_version: int | None,
                     upgrade_type: UpgradeType) -> list[FeatureUpdate]:
    wanted: list[FeatureUpdate] = []
    for text in updates:
        name, value = key_value(text, "--feature")
        if not (value.isascii() and value.isdigit()):
            raise click.BadParameter(
                f"level {value!r} of {name} is not a number", param_hint="--feature"
            )
        wanted.append(FeatureUpdate(name, int(value), upgrade_type))
    if metadata_version is not None:
        wanted.append(FeatureUpdate(METADATA_VERSION, metadata_version, upgrade_type))
    if not wanted:
        raise click.UsageError("nothing to change: give --feature NAME=LEVEL or "
                               "--metadata-version N")
    return wanted


def _update_features(opts: AdminOptions, wanted: list[FeatureUpdate], validate_only: bool,
                     ) -> None:
    def action(client: AdminClient) -> int:
        results = client.update_features(wanted, validate_only=validate_only)
        return report(
            opts,
            results,
            title="Feature updates" + (" (validate only)" if validate_only else ""),
            columns=("feature", "status"),
            row=lambda r: (r.name, status(r.error)),
            name=lambda r: r.name,
        )

    run_admin(opts, action)


@features.command("upgrade")
@click.option("--feature", "updates", multiple=True, help="NAME=LEVEL; repeatable.")
@click.option("--metadata-version", type=int, help=f"Shorthand for --feature {METADATA_VERSION}=N.")
@click.option("--validate-only", is_flag=True, help="Check, change nothing.")
@admin_options
def features_upgrade(
    opts: AdminOptions, updates: tuple[str, ...], metadata_version: int | None, validate_only: bool
) -> None:
    """Raise feature levels (never a downgrade)."""
    _update_features(opts, _feature_updates(updates, metadata_version, UpgradeType.UPGRADE),
                     validate_only)


@features.command("downgrade")
@click.option("--feature", "updates", multiple=True, help="NAME=LEVEL; repeatable.")
@click.option("--metadata-version", type=int, help=f"Shorthand for --feature {METADATA_VERSION}=N.")
@click.option("--unsafe", is_flag=True,
              help="Lower the level even though the state holds data only a higher level "
              "keeps (the next snapshot leaves it out); without it such a downgrade is "
              "refused, naming the data.")
@click.option("--validate-only", is_flag=True, help="Check, change nothing.")
@admin_options
def features_downgrade(opts: AdminOptions, updates: tuple[str, ...],
                       metadata_version: int | None, unsafe: bool, validate_only: bool) -> None:
    """Lower feature levels (Kafka's kafka-features downgrade)."""
    kind = UpgradeType.UNSAFE_DOWNGRADE if unsafe else UpgradeType.SAFE_DOWNGRADE
    _update_features(opts, _feature_updates(updates, metadata_version, kind), validate_only)


@click.group()
def brokers() -> None:
    """Registered brokers."""


@brokers.command("unregister")
@click.option("--id", "broker_id", type=int, required=True, help="The broker id.")
@admin_options
def brokers_unregister(opts: AdminOptions, broker_id: int) -> None:
    """Remove a broker's registration (for a broker that is gone for good)."""

    def action(client: AdminClient) -> int:
        error = client.unregister_broker(broker_id)
        if opts.json:
            emit_json({"broker_id": broker_id, "error": error})
        elif error.ok:
            click.echo(f"broker {broker_id} unregistered")
        if not error.ok:
            if not opts.json:
                click.echo(f"error: broker {broker_id}: {error}", err=True)
            return EXIT_ITEM_FAILED
        return EXIT_OK

    run_admin(opts, action)
