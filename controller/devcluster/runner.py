"""`metakraft dev`: start (or resume) the local cluster, show it, keep it running
until Ctrl-C, stop it cleanly. `--scenario` runs the scripted tour instead of
waiting.

Exit status: 0 after a clean stop on Ctrl-C/SIGTERM (or a passed tour); 1 when the
cluster could not start or a tour step failed; 2 for a request that cannot be met
(a data dir locked by another run, a controller count that does not match).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from broker_agent.replica.client import Consumer, DataClientError, Producer
from broker_agent.replica.records import DataRecord
from controller.api.client import AdminClientError
from controller.devcluster.configs import tier_url
from controller.devcluster.layout import ClusterSpec, DevClusterError
from controller.devcluster.security import command_config_path
from controller.devcluster.session import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    DevSession,
    Interrupted,
    ProcessDied,
    WaitAborted,
)
from controller.devcluster.supervisor import Exit
from controller.metadata import CreatableTopic, ErrorCode
from controller.storage.errors import MetaPropertiesError

DEMO_TOPIC = "demo"
DEMO_PARTITIONS = 6


def cli_name() -> str:
    """How to call the CLI from a shell: `metakraft` if that is ours on PATH, else
    the path of the one beside this interpreter."""
    ours = Path(sys.executable).parent / "metakraft"
    found = shutil.which("metakraft")
    if found is not None and Path(found).resolve() == ours.resolve():
        return "metakraft"
    if ours.exists():
        try:
            return str(ours.relative_to(Path.cwd()))
        except ValueError:
            return str(ours)
    return "metakraft"


def report_exit(console: Console, spec: ClusterSpec, death: Exit) -> None:
    console.print(f"[bold red]{death.describe()}[/]", highlight=False, soft_wrap=True)
    for line in death.last_lines:
        console.print(f"    {line}", markup=False, highlight=False, soft_wrap=True)
    node = spec.node(death.name)
    paths = spec.paths(node)
    console.print(f"  not restarted; to start it by hand (unsupervised): {cli_name()} "
                  f"{node.role} --config {paths.config} >> {paths.log} 2>&1 &",
                  markup=False, highlight=False, soft_wrap=True)


def process_table(session: DevSession) -> Table:
    spec = session.spec
    table = Table(title=f"cluster {spec.cluster_id}", title_justify="left")
    for column in ("process", "address", "pid", "metrics"):
        table.add_column(column, no_wrap=True)
    for node in spec.nodes:
        table.add_row(node.name, node.address, str(session.supervisor.pid(node.name) or "-"),
                      node.metrics_address or "-")
    return table


def shown(path: Path) -> str:
    """A path as a person would type it here: relative to the working dir if inside."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def next_steps(session: DevSession, leader: int | None) -> list[str]:
    spec = session.spec
    cli = cli_name()
    first_controller = spec.controllers[0]
    lines = [f"export METAKRAFT_BOOTSTRAP={spec.bootstrap}"]
    if spec.secure:
        lines.append(f"export METAKRAFT_COMMAND_CONFIG={shown(command_config_path(spec))}"
                     "    # your certificate: User:admin, a super user")
    lines += [
        f"{cli} topics list",
        f"seq 1 5 | {cli} produce --topic {DEMO_TOPIC} --partition 0    # acks=all",
        f"{cli} consume --topic {DEMO_TOPIC} --partition 0 --from-beginning",
        f"{cli} topics describe --name {DEMO_TOPIC}",
        f"{cli} cluster describe",
        f"{cli} quorum describe --replication",
    ]
    if spec.secure:
        lines.append(f"{cli} acls list    # who may do what (each broker: CLUSTER_ACTION)")
    if spec.brokers:
        lines.append(f"{cli} broker-status --address {spec.brokers[0].address}")
    data_dir = shown(spec.paths(first_controller).data_dir)
    lines.append(f"{cli} log dump {data_dir}")
    tier = tier_url(spec)
    lines.append(f"{cli} tier describe --tier {tier} --log-dir {data_dir}    # the remote tier")
    lines.append(f"{cli} audit --tier {tier} --log-dir {data_dir}    # Spark audit of the "
                 "whole history (needs Java)")
    leader_node = next((n for n in spec.controllers if n.node_id == leader), None)
    pid = session.supervisor.pid(leader_node.name) if leader_node is not None else None
    if pid is not None:
        lines.append(f"kill -9 {pid}    # the active controller: then `{cli} quorum describe` "
                     "shows the new leader")
    if spec.brokers:
        broker_pid = session.supervisor.pid(spec.brokers[0].name)
        lines.append(f"kill -9 {broker_pid}    # {spec.brokers[0].name}: `{cli} cluster describe` "
                     "shows it fenced after a few seconds, `topics describe` its leaderships "
                     "moved")
    lines.append(f"cat {shown(spec.root / 'cluster.json')}    # every process, for scripts")
    return lines


def create_demo_topic(session: DevSession) -> str:
    """Create `demo` (6 partitions, RF min(3, brokers)); a resumed cluster has it."""
    brokers = len(session.spec.brokers)
    if brokers == 0:
        return f"no brokers: topic {DEMO_TOPIC!r} not created (it needs a broker)"
    assert session.probe is not None
    replication = min(3, brokers)
    (result,) = session.probe.admin.create_topics(
        [CreatableTopic(DEMO_TOPIC, DEMO_PARTITIONS, replication)])
    if result.error.code is ErrorCode.TOPIC_ALREADY_EXISTS:
        return f"topic {DEMO_TOPIC!r} already exists"
    if not result.error.ok:
        raise DevClusterError(f"creating topic {DEMO_TOPIC!r} failed: {result.error}")
    return (f"created topic {DEMO_TOPIC!r}: {DEMO_PARTITIONS} partitions, "
            f"replication factor {replication}")


def demo_round_trip(session: DevSession) -> str:
    """Produce a record to demo-0 (acks=all) and read it back: the data plane works."""
    assert session.probe is not None
    tls = session.probe.tls
    text = f"hello from metakraft dev at {time.strftime('%H:%M:%S')}"
    try:
        with Producer(session.probe.admin, tls=tls, timeout_ms=30_000) as producer:
            answer = producer.send(DEMO_TOPIC, [DataRecord(None, text.encode())], partition=0)
        with Consumer(session.probe.admin, tls=tls, timeout_ms=30_000) as consumer:
            read = [r.record.value.decode()
                    for r in consumer.read(DEMO_TOPIC, 0, answer.base_offset)]
    except DataClientError as exc:
        raise DevClusterError(f"producing to {DEMO_TOPIC}-0 failed: {exc}") from None
    if read[:1] != [text]:
        raise DevClusterError(f"{DEMO_TOPIC}-0 did not give back what was produced: {read[:1]}")
    return (f"produced {text!r} to {DEMO_TOPIC}-0 (offset {answer.base_offset}, acks=all) "
            "and read it back")


def start_cluster(session: DevSession) -> int:
    """Prepare, start and wait (with progress); returns the active controller id."""
    console = session.console
    spec = session.spec
    verb = "Resuming" if session.resumed else "Creating"
    console.print(f"[bold]{verb} cluster {spec.cluster_id}[/] in {spec.root}: "
                  f"{len(spec.controllers)} controllers, {len(spec.brokers)} brokers",
                  highlight=False)
    formatted = session.prepare()
    if formatted:
        console.print(f"  formatted {len(formatted)} data dirs", highlight=False)
    with console.status("starting processes...") as status:
        def progress(message: str) -> None:
            console.print(f"  [green]ready[/] {message}", highlight=False)
            status.update(f"{message}; waiting for the rest...")

        leader = session.start_and_wait(progress)
        session.reconcile_voters(progress)
    console.print(f"  [green]ready[/] {create_demo_topic(session)}", highlight=False)
    if spec.brokers:
        console.print(f"  [green]ready[/] {demo_round_trip(session)}", highlight=False)
    console.print(f"  cluster.json: {spec.root / 'cluster.json'}", highlight=False)
    return leader


def _watch(session: DevSession) -> None:
    """Until a signal: report processes that die (they are not restarted)."""
    while not session.stop_requested.wait(0.5):
        for death in session.supervisor.poll_exits():
            report_exit(session.console, session.spec, death)


def _stop(session: DevSession) -> None:
    console = session.console
    if not session.supervisor.running_names():
        return
    console.print("stopping: brokers first (controlled shutdown), then controllers "
                  "(Ctrl-C again: kill them at once)...")
    codes = session.stop()
    summary = ", ".join(f"{name}={code}" for name, code in codes.items()) or "nothing was running"
    console.print(f"stopped ({summary})", highlight=False)


def run_dev(root: Path, controllers: int | None, brokers: int | None, *,
            scenario: bool = False, secure: bool = True, console: Console | None = None) -> int:
    # soft_wrap: long lines (commands, paths) stay whole for copy and paste.
    console = console or Console(highlight=False, soft_wrap=True)
    try:
        session = DevSession(root, controllers, brokers, console, secure=secure)
    except (DevClusterError, MetaPropertiesError) as exc:
        console.print(f"[red]metakraft dev:[/] {exc}", highlight=False)
        return EXIT_REFUSED
    if scenario:
        from controller.devcluster.scenario import MIN_BROKERS

        if len(session.spec.brokers) < MIN_BROKERS:
            console.print(f"[red]metakraft dev --scenario needs at least {MIN_BROKERS} brokers[/]"
                          " (it kills one and moves a partition to a broker that had none of it)")
            session.close()
            return EXIT_REFUSED
    session.install_signal_handlers()
    try:
        try:
            leader = start_cluster(session)
        except ProcessDied as died:
            for death in died.exits:
                report_exit(console, session.spec, death)
            console.print("[red]the cluster did not start[/]")
            return EXIT_FAILED
        except (DevClusterError, MetaPropertiesError, AdminClientError) as exc:
            console.print(f"[red]the cluster did not start:[/] {exc}", highlight=False)
            return EXIT_FAILED
        except Interrupted as stop:
            console.print(f"interrupted by {stop.signal_name} while starting")
            return EXIT_OK
        if scenario:
            from controller.devcluster.scenario import finish_scenario, run_scenario

            return finish_scenario(session, run_scenario(session))
        console.print(f"\n[bold]bootstrap:[/] {session.spec.bootstrap}", highlight=False)
        console.print(process_table(session))
        console.print(f"logs: {shown(session.spec.root)}/<process>/process.log", soft_wrap=True)
        console.print("\nTry, in another terminal:")
        for line in next_steps(session, leader):
            console.print(f"  {line}", markup=False, soft_wrap=True)
        console.print("\nCtrl-C stops everything. Running `metakraft dev` again with the same "
                      "--data-dir resumes this cluster.")
        _watch(session)
        return EXIT_OK
    except WaitAborted:
        return EXIT_OK
    finally:
        try:
            _stop(session)
        finally:
            session.restore_signal_handlers()
            session.close()
