"""Small writes side by side: metakraft, etcd and ZooKeeper on this machine.

    .venv/bin/python bench/peer_bench.py [--rounds 3] [--seconds 10] [--systems etcd,zookeeper,metakraft]

Each system runs as three server processes on loopback with its durable default
(fsync before a write is acknowledged: metakraft's log always fsyncs; etcd's WAL
fsyncs unless `--unsafe-no-fsync`, which is not given; ZooKeeper's `forceSync`
defaults to yes). etcd (Debian's `etcd-server`) and ZooKeeper (Debian's `zookeeper`,
on the machine's JDK) are installed with apt by this script when missing; it stops
with a one-line reason when that is not possible.

One closed-loop harness drives all three: `--procs` client processes, each an
asyncio loop running its share of the clients; every client has its own
connection and sends its next write as soon as the last one is answered (a write
is answered after it is committed by a majority and fsynced). The same Python gRPC
stack (grpc.aio) drives metakraft and etcd (etcd's KV service is gRPC; its
requests are encoded here, field by field, from etcd's `rpc.proto`); ZooKeeper
speaks its own protocol, driven with kazoo, the Python ZooKeeper client, whose
async calls are awaited by the same loop. Clients talk to the leader. Each
system is driven the way its own client sends: etcd's clients make one unary call
per write, metakraft's Python client (`AdminClient`) one message on its multiplexed
`Admin/Stream` (one request in flight); `--systems metakraft-unary` measures
metakraft with a unary call per write instead, `metakraft-no-snapshots`
metakraft whose controllers never write a snapshot (what snapshots cost the writes),
and `--baseline REV` adds `metakraft-base`: the controllers of commit REV (its
files, `git archive`), run the same way in the same rounds, for an A/B of a change.

The writes:
  small  etcd: one Put of a 100-byte value under a new key; ZooKeeper: one create
         of a znode holding 100 bytes; metakraft: one IncrementalAlterConfigs SET
         of a topic config (one ConfigRecord in the log).
  101    101 records in one write: etcd a Txn of 101 Puts, ZooKeeper a multi of 101
         creates, metakraft a CreateTopics of one topic of 100 partitions (one
         TopicRecord and 100 PartitionRecords). Reported as records/s.
  idle   no client at all (`--rows idlex0`): what the three servers burn doing
         nothing, as a share of one core (the CPU seconds of the window over its
         length).

Every round starts each system's cluster afresh, measures every row, and stops
it; the systems' order rotates from round to round so drift in the machine does
not favour one. Per row: writes/s, records/s, p50/p99 latency, the CPU seconds
of the three server processes over the window (utime + stime from /proc) and
that per write. The summary gives the median over the rounds and metakraft's
ratio to each peer measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import multiprocessing as mp
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller_bench import BROKERS, machine, proc_cpu_s

from tests.support.polling import wait_until
from tests.support.ports import free_ports

SYSTEMS = ("etcd", "zookeeper", "metakraft")
# Also known to --systems: metakraft's writes as unary calls, not over Admin/Stream;
# metakraft without snapshots; metakraft at the commit `--baseline` names.
OPTIONAL_SYSTEMS = ("metakraft-unary", "metakraft-no-snapshots", "metakraft-base")
VALUE = b"v" * 100
# The rows of one round: (kind, clients).
ROWS = (("small", 1), ("small", 16), ("small", 64), ("101", 16))
RECORDS = {"small": 1, "101": 101, "idle": 0}


def ensure_packages() -> None:
    """etcd and ZooKeeper from Debian's packages, installed when missing."""
    wanted = {"etcd": "etcd-server", "etcdctl": "etcd-client",
              "/usr/share/java/zookeeper.jar": "zookeeper"}
    missing = sorted({pkg for exe, pkg in wanted.items()
                      if not (Path(exe).exists() if exe.startswith("/") else shutil.which(exe))})
    if missing:
        apt = shutil.which("apt-get")
        if apt is None:
            raise SystemExit(f"needs the Debian packages {', '.join(missing)} and there is no apt-get")
        sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
        print(f"# installing {' '.join(missing)} with apt-get", flush=True)
        done = subprocess.run([*sudo, apt, "install", "-y", "-q", *missing],
                              capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise SystemExit(f"apt-get install {' '.join(missing)} failed: {' '.join(tail)}")
    if shutil.which("java") is None:
        raise SystemExit("ZooKeeper needs a JDK (java on PATH); install openjdk-17-jre-headless")


# -------------------------------------------------------------------- clusters


class Cluster(Protocol):
    def start(self) -> None: ...
    def leader(self) -> str: ...
    def pids(self) -> list[int]: ...
    def close(self) -> None: ...


class Processes:
    """Three server processes with their output in files under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, argv: list[str]) -> None:
        with (self.root / f"{name}.out").open("wb") as out:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                               cwd=self.root))

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class EtcdCluster(Processes):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        ports = free_ports(6)
        self.client = [f"127.0.0.1:{p}" for p in ports[:3]]
        self.peer = [f"http://127.0.0.1:{p}" for p in ports[3:]]

    def start(self) -> None:
        initial = ",".join(f"e{i}={u}" for i, u in enumerate(self.peer))
        for i in range(3):
            self.spawn(f"e{i}", [
                "etcd", "--name", f"e{i}", "--data-dir", str(self.root / f"e{i}"),
                "--listen-client-urls", f"http://{self.client[i]}",
                "--advertise-client-urls", f"http://{self.client[i]}",
                "--listen-peer-urls", self.peer[i], "--initial-advertise-peer-urls", self.peer[i],
                "--initial-cluster", initial, "--initial-cluster-state", "new",
                "--initial-cluster-token", "peer-bench", "--logger", "zap",
                "--log-level", "warn"])
        wait_until(self.leader, 30, "etcd's leader")

    def leader(self) -> str:
        out = subprocess.run(["etcdctl", "--endpoints", ",".join(self.client), "endpoint",
                              "status", "-w", "json"], capture_output=True, text=True,
                             env={**os.environ, "ETCDCTL_API": "3"}, timeout=10)
        for s in json.loads(out.stdout or "[]"):
            if s["Status"]["leader"] and s["Status"]["header"]["member_id"] == s["Status"]["leader"]:
                return str(s["Endpoint"])
        return ""


class ZooKeeperCluster(Processes):
    CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        ports = free_ports(9)
        self.client = [f"127.0.0.1:{p}" for p in ports[:3]]
        self.quorum = [(ports[3 + i], ports[6 + i]) for i in range(3)]

    def start(self) -> None:
        servers = "\n".join(f"server.{i + 1}=127.0.0.1:{q}:{e}"
                            for i, (q, e) in enumerate(self.quorum))
        for i in range(3):
            data = self.root / f"z{i}"
            data.mkdir()
            (data / "myid").write_text(f"{i + 1}\n")
            cfg = self.root / f"z{i}.cfg"
            # forceSync is left at its default (yes): a write is fsynced before it is
            # acknowledged. No admin web server (its port 8080 would collide).
            cfg.write_text(f"tickTime=500\ninitLimit=40\nsyncLimit=20\ndataDir={data}\n"
                           f"clientPort={self.client[i].split(':')[1]}\n"
                           "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                           "4lw.commands.whitelist=srvr\nmaxClientCnxns=0\n" + servers + "\n")
            self.spawn(f"z{i}", ["java", "-Xms512m", "-Xmx2g", "-cp", self.CLASSPATH,
                                 f"-Dzookeeper.log.dir={self.root}",
                                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)])
        wait_until(self.leader, 60, "ZooKeeper's leader")

    @staticmethod
    def _mode(address: str) -> str:
        host, port = address.split(":")
        with socket.create_connection((host, int(port)), timeout=2) as s:
            s.sendall(b"srvr")
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
        for line in answer.decode().splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""

    def leader(self) -> str:
        modes = {}
        for a in self.client:
            try:
                modes[a] = self._mode(a)
            except OSError:
                modes[a] = ""
        leaders = [a for a, m in modes.items() if m == "leader"]
        ready = sum(1 for m in modes.values() if m in ("leader", "follower")) == 3
        return leaders[0] if leaders and ready else ""


class MetakraftCluster:
    """Three `metakraft controller` processes (the tests' launcher) and 12 registered,
    unfenced brokers, so CreateTopics can place replicas."""

    def __init__(self, root: Path, *, snapshots: bool = True,
                 source_root: Path | None = None) -> None:
        from tests.support.controller_processes import ControllerCluster

        # No snapshots: an interval no bench run reaches.
        self.cluster = (ControllerCluster(root, 3) if snapshots
                        else ControllerCluster(root, 3, snapshot_interval_bytes=1 << 50))
        if source_root is not None:  # the controllers run another commit's code
            for node in self.cluster.nodes.values():
                node.source_root = source_root

    def start(self) -> None:
        self.cluster.start()
        self.cluster.register_brokers(list(range(1, BROKERS + 1)), timeout_s=30)
        wait_until(self.leader, 30, "metakraft's active controller")

    def leader(self) -> str:
        active = self.cluster.active_node()
        return active.address if active is not None else ""

    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.cluster.nodes.values() if n.proc is not None]

    def close(self) -> None:
        self.cluster.close()


# `--baseline REV`: the source tree of that commit, run as the system `metakraft-base`.
BASELINE_TREE: list[Path] = []


def baseline_tree(rev: str) -> Path:
    """The files of commit `rev` in a directory of their own (removed at exit)."""
    repo = Path(__file__).resolve().parents[1]
    tree = Path(tempfile.mkdtemp(prefix="peer-bench-baseline-"))
    atexit.register(shutil.rmtree, tree, ignore_errors=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    # Generated code is committed; nothing else to build.
    return tree


def make_cluster(system: str, root: Path) -> Cluster:
    if system == "metakraft-no-snapshots":
        return MetakraftCluster(root, snapshots=False)
    if system == "metakraft-base":
        return MetakraftCluster(root, source_root=BASELINE_TREE[0])
    return {"etcd": EtcdCluster, "zookeeper": ZooKeeperCluster,
            "metakraft": MetakraftCluster, "metakraft-unary": MetakraftCluster}[system](root)


# --------------------------------------------------------------------- clients


def _pb_bytes(field: int, value: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2)."""
    out = bytearray([field << 3 | 2])
    n = len(value)
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + value


def etcd_put(key: bytes) -> bytes:
    """etcdserverpb.PutRequest{key = 1, value = 2}."""
    return _pb_bytes(1, key) + _pb_bytes(2, VALUE)


def etcd_txn(keys: list[bytes]) -> bytes:
    """etcdserverpb.TxnRequest{success = 2: repeated RequestOp{request_put = 2}}, no
    compares, so the success branch always runs."""
    return b"".join(_pb_bytes(2, _pb_bytes(2, etcd_put(k))) for k in keys)


Writer = Callable[[int], Awaitable[None]]


async def _etcd_writer(leader: str, kind: str, tag: str) -> tuple[Writer, Callable[[], Awaitable[None]]]:
    import grpc

    channel = grpc.aio.insecure_channel(leader)
    put = channel.unary_unary("/etcdserverpb.KV/Put")
    txn = channel.unary_unary("/etcdserverpb.KV/Txn")

    async def write(n: int) -> None:
        if kind == "small":
            await put(etcd_put(f"/bench/{tag}/{n}".encode()))
        else:
            await txn(etcd_txn([f"/bench/{tag}/{n}/{i}".encode() for i in range(101)]))

    return write, channel.close


async def _metakraft_writer(leader: str, kind: str, tag: str, *, unary: bool = False
                           ) -> tuple[Writer, Callable[[], Awaitable[None]]]:
    """One client. By default its writes go over one multiplexed `Admin/Stream`, one
    request in flight, as the project's Python client (`AdminClient`) sends them;
    `unary=True` makes each write its own unary call (`metakraft-unary`)."""
    import grpc

    from controller.api import admin_pb2 as pb
    from controller.api import admin_pb2_grpc as rpc

    channel = grpc.aio.insecure_channel(leader)
    stub = rpc.AdminStub(channel)
    topic = f"cfg-{tag}"
    if kind == "small":
        made = await stub.CreateTopics(pb.CreateTopicsRequest(
            topics=[pb.CreatableTopic(name=topic, num_partitions=1, replication_factor=3)]))
        code = made.results[0].error.code
        if code not in ("NONE", "TOPIC_ALREADY_EXISTS"):
            raise RuntimeError(f"CreateTopics {topic}: {code}")
    stream = None if unary else stub.Stream()
    next_id = 0

    async def call(method: str, request: Any, response_type: Any) -> Any:
        nonlocal next_id
        if stream is None:
            return await getattr(stub, method)(request)
        next_id += 1
        await stream.write(pb.StreamRequest(id=next_id, method=method,
                                            payload=request.SerializeToString()))
        answer = await stream.read()
        if answer is grpc.aio.EOF:
            raise RuntimeError(f"{method} on the stream: the stream ended")
        if answer.id != next_id or answer.status_code:
            # One line: the row's error column shows the first error's first line.
            raise RuntimeError(f"{method} on the stream: answer {answer.id} to request "
                               f"{next_id}: code {answer.status_code}: "
                               f"{answer.status_details} {dict(answer.trailing)}")
        return response_type.FromString(answer.payload)

    def check(code: str, what: str) -> None:
        if code != "NONE":
            raise RuntimeError(f"{what}: {code}")

    async def write(n: int) -> None:
        if kind == "small":
            answer = await call("IncrementalAlterConfigs", pb.IncrementalAlterConfigsRequest(
                resources=[pb.AlterConfigsResource(
                    resource=pb.ConfigResource(type=pb.RESOURCE_TYPE_TOPIC, name=topic),
                    ops=[pb.AlterConfigOp(key="retention.ms", op=pb.ALTER_CONFIG_OP_TYPE_SET,
                                          value=str(86_400_000 + n))])]),
                pb.IncrementalAlterConfigsResponse)
            check(answer.results[0].error.code, "IncrementalAlterConfigs")
        else:
            created = await call("CreateTopics", pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
                name=f"t-{tag}-{n}", num_partitions=100, replication_factor=3)]),
                pb.CreateTopicsResponse)
            check(created.results[0].error.code, "CreateTopics")

    async def close() -> None:
        if stream is not None:
            await stream.done_writing()
        await channel.close()

    return write, close


async def _metakraft_unary_writer(leader: str, kind: str, tag: str
                                  ) -> tuple[Writer, Callable[[], Awaitable[None]]]:
    return await _metakraft_writer(leader, kind, tag, unary=True)


async def _zookeeper_writer(leader: str, kind: str, tag: str) -> tuple[Writer, Callable[[], Awaitable[None]]]:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=leader, timeout=30)
    await asyncio.to_thread(zk.start, 30)
    base = f"/bench/{tag}"
    await asyncio.to_thread(zk.ensure_path, base)
    loop = asyncio.get_running_loop()

    async def wait(result: Any) -> None:
        done: asyncio.Future[None] = loop.create_future()

        def settle(r: Any) -> None:
            if done.done():
                return
            if r.exception:
                done.set_exception(r.exception)
            else:
                done.set_result(None)

        def finished(r: Any) -> None:  # on kazoo's thread
            loop.call_soon_threadsafe(settle, r)
        result.rawlink(finished)
        await done

    async def write(n: int) -> None:
        if kind == "small":
            await wait(zk.create_async(f"{base}/{n}", VALUE))
        else:
            t = zk.transaction()
            for i in range(101):
                t.create(f"{base}/{n}-{i}", VALUE)
            await wait(t.commit_async())

    async def close() -> None:
        await asyncio.to_thread(zk.stop)
        await asyncio.to_thread(zk.close)

    return write, close


WRITERS = {"etcd": _etcd_writer, "zookeeper": _zookeeper_writer, "metakraft": _metakraft_writer,
           "metakraft-unary": _metakraft_unary_writer,
           "metakraft-no-snapshots": _metakraft_writer, "metakraft-base": _metakraft_writer}

# What a client process reports: writes in the window, their latencies (s), the
# first errors, its CPU seconds.
ClientReport = tuple[int, list[float], list[str], float]


def _client_proc(system: str, kind: str, leader: str, clients: int, prefix: str,
                 start_at: float, stop_at: float, out: mp.Queue[object]) -> None:
    latencies: list[float] = []
    errors: list[str] = []

    async def one(tag: str) -> None:
        write, close = await WRITERS[system](leader, kind, tag)
        n = 0
        while time.time() < stop_at:
            t0 = time.time()
            try:
                await write(n)
            except Exception as e:
                if len(errors) < 3:
                    errors.append(f"{type(e).__name__}: {e}"[:200])
                await asyncio.sleep(0.01)
                continue
            finally:
                n += 1
            t1 = time.time()
            if t0 >= start_at and t1 <= stop_at:
                latencies.append(t1 - t0)
        await close()

    async def main() -> None:
        await asyncio.gather(*(one(f"{prefix}-{i}") for i in range(clients)))

    asyncio.run(main())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put((len(latencies), latencies, errors, usage.ru_utime + usage.ru_stime))


@attrs.frozen
class Row:
    system: str
    kind: str
    clients: int
    writes_per_s: float
    p50_ms: float
    p99_ms: float
    server_cpu_s: float
    client_cpu_s: float
    errors: tuple[str, ...]
    seconds: float  # the measured window

    @property
    def records_per_s(self) -> float:
        return self.writes_per_s * RECORDS[self.kind]

    @property
    def cpu_ms_per_write(self) -> float:
        return self.server_cpu_s / max(1.0, self.writes_per_s * self.seconds) * 1e3

    @property
    def core_percent(self) -> float:
        """The servers' CPU as a share of one core over the window."""
        return 100 * self.server_cpu_s / self.seconds

    def line(self) -> str:
        if self.kind == "idle":
            return (f"{self.system:15s} {self.kind:>5s} {self.clients:7d} {'':9s} {'':10s} "
                    f"{'':7s} {'':7s} {self.server_cpu_s:12.1f} {'':11s} {'':12s}  "
                    f"idle: {self.core_percent:.1f}% of one core")
        errors = f"{len(self.errors)}{' ' + self.errors[0] if self.errors else ''}"
        return (f"{self.system:15s} {self.kind:>5s} {self.clients:7d} {self.writes_per_s:9.0f} "
                f"{self.records_per_s:10.0f} {self.p50_ms:7.1f} {self.p99_ms:7.1f} "
                f"{self.server_cpu_s:12.1f} {self.cpu_ms_per_write:11.2f} "
                f"{self.client_cpu_s:12.1f}  {errors}")


HEADER = ("system           kind clients  writes/s  records/s  p50 ms  p99 ms  server cpu s  "
          "cpu ms/write  client cpu s  errors")


def measure(system: str, cluster: Cluster, kind: str, clients: int,
            args: argparse.Namespace, prefix: str) -> Row:
    if kind == "idle":
        return measure_idle(system, cluster, args)
    ctx = mp.get_context("spawn")
    procs = min(args.procs, clients)
    out: mp.Queue[object] = ctx.Queue()
    leader = cluster.leader()
    pids = cluster.pids()
    start_at = time.time() + args.startup + args.warmup
    stop_at = start_at + args.seconds
    per = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    workers = [ctx.Process(target=_client_proc, args=(
        system, kind, leader, per[i], f"{prefix}p{i}", start_at, stop_at, out))
        for i in range(procs)]
    for w in workers:
        w.start()
    time.sleep(max(0.0, start_at - time.time()))
    cpu_start = [proc_cpu_s(p) for p in pids]
    time.sleep(max(0.0, stop_at - time.time()))
    cpu = sum(proc_cpu_s(p) - c for p, c in zip(pids, cpu_start, strict=True))
    results: list[ClientReport] = [out.get(timeout=300) for _ in workers]  # type: ignore[misc]
    for w in workers:
        w.join()
    lat = sorted(x for r in results for x in r[1])
    p50 = statistics.median(lat) * 1e3 if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3 if lat else float("nan")
    return Row(system, kind, clients, sum(r[0] for r in results) / args.seconds, p50, p99,
               cpu, sum(r[3] for r in results), tuple(e for r in results for e in r[2]),
               args.seconds)


def measure_idle(system: str, cluster: Cluster, args: argparse.Namespace) -> Row:
    """The servers' CPU over `--seconds` with no client, after the warm-up."""
    pids = cluster.pids()
    time.sleep(args.startup + args.warmup)
    cpu_start = [proc_cpu_s(p) for p in pids]
    time.sleep(args.seconds)
    cpu = sum(proc_cpu_s(p) - c for p, c in zip(pids, cpu_start, strict=True))
    return Row(system, "idle", 0, 0.0, float("nan"), float("nan"), cpu, 0.0, (), args.seconds)


def summarize(rows: list[Row], systems: list[str], spec: tuple[tuple[str, int], ...]) -> None:
    """Medians over the rounds, and metakraft's ratios to each peer."""
    def med(system: str, kind: str, clients: int, field: str) -> float:
        values = [getattr(r, field) for r in rows
                  if (r.system, r.kind, r.clients) == (system, kind, clients)]
        return statistics.median(values) if values else float("nan")

    idle = [s for s in systems if any(r.kind == "idle" and r.system == s for r in rows)]
    if idle:
        print("\n# idle: the three servers' CPU as a share of one core (median, each round)")
        for s in idle:
            shares = [r.core_percent for r in rows if r.kind == "idle" and r.system == s]
            print(f"{s:15s} {statistics.median(shares):5.1f}%  "
                  f"({', '.join(f'{x:.1f}' for x in shares)})")
        spec = tuple((k, c) for k, c in spec if k != "idle")
        if not spec:
            return
    print("\n# medians over the rounds")
    print("system           kind clients  writes/s  records/s  p50 ms  p99 ms  cpu ms/write")
    for kind, clients in spec:
        for s in systems:
            print(f"{s:15s} {kind:>5s} {clients:7d} {med(s, kind, clients, 'writes_per_s'):9.0f} "
                  f"{med(s, kind, clients, 'records_per_s'):10.0f} "
                  f"{med(s, kind, clients, 'p50_ms'):7.1f} {med(s, kind, clients, 'p99_ms'):7.1f} "
                  f"{med(s, kind, clients, 'cpu_ms_per_write'):13.2f}")
    if "metakraft" not in systems:
        return
    print("\n# metakraft / peer (medians): writes/s, cpu per write, p50")
    for peer in (s for s in systems if not s.startswith("metakraft")):
        for kind, clients in spec:
            ratio = {f: med("metakraft", kind, clients, f) / med(peer, kind, clients, f)
                     for f in ("writes_per_s", "cpu_ms_per_write", "p50_ms")}
            print(f"vs {peer:10s} {kind:>5s} {clients:4d} clients: "
                  f"writes/s {ratio['writes_per_s']:5.2f}x  "
                  f"cpu/write {ratio['cpu_ms_per_write']:5.2f}x  p50 {ratio['p50_ms']:5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--startup", type=float, default=3.0,
                        help="time given to client processes to start and connect")
    parser.add_argument("--procs", type=int, default=4, help="client processes (at most)")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--rows", default=",".join(f"{k}x{c}" for k, c in ROWS),
                        help="kind x clients, e.g. smallx1,101x16")
    parser.add_argument("--dir", default=None, help="where the data dirs go")
    parser.add_argument("--baseline", default=None, metavar="REV",
                        help="also run the controllers of commit REV, as `metakraft-base`")
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    known = SYSTEMS + OPTIONAL_SYSTEMS
    unknown = set(systems) - set(known)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}; known: {', '.join(known)}")
    spec = tuple((k, int(c)) for k, c in (r.split("x") for r in args.rows.split(",")))
    if args.baseline:
        BASELINE_TREE.append(baseline_tree(args.baseline))
        if "metakraft-base" not in systems:
            systems.append("metakraft-base")
    elif "metakraft-base" in systems:
        raise SystemExit("--systems metakraft-base needs --baseline REV")
    if any(k not in RECORDS for k, _ in spec):
        raise SystemExit(f"--rows: kinds are {', '.join(RECORDS)}")
    if {"etcd", "zookeeper"} & set(systems):
        ensure_packages()
    if "zookeeper" in systems:
        import kazoo  # noqa: F401 - fail before starting anything
    print(f"# {machine()}")
    print(f"# 3 servers each on loopback, fsync on; {args.seconds:.0f}s measured after "
          f"{args.warmup:.0f}s warm-up; {args.procs} client processes at most")
    print(HEADER, flush=True)
    rows: list[Row] = []
    for r in range(args.rounds):
        order = systems[r % len(systems):] + systems[:r % len(systems)]
        for system in order:
            root = Path(tempfile.mkdtemp(prefix=f"peer-bench-{system}-", dir=args.dir))
            cluster = make_cluster(system, root)
            try:
                cluster.start()
                for kind, clients in spec:
                    row = measure(system, cluster, kind, clients, args, f"r{r}{kind}c{clients}")
                    rows.append(row)
                    print(row.line(), flush=True)
            finally:
                cluster.close()
                shutil.rmtree(root, ignore_errors=True)
    summarize(rows, systems, spec)


if __name__ == "__main__":
    main()
