"""What security costs: CreateTopics throughput with mutual TLS and the authorizer
(10,000 ACLs loaded) against plaintext without one, and the cost of one
authorization check.

    .venv/bin/python bench/security_bench.py create [--seconds 10] [--rounds 2]
    .venv/bin/python bench/security_bench.py authorize [--acls 10000]

`create`: two 3-controller clusters of real processes side by side (fsync on, 12
fake brokers each; tests/support/controller_processes.py): one plaintext with no
authorizer, one with mutual TLS on every connection and the authorizer on, holding
10,000 ACLs for other principals plus the client's own (`User:bench` may CREATE
topics under the prefix `t` and DESCRIBE the cluster; not a super user, so every
request is checked against the index). The rows of bench/controller_bench.py (1
and 100 partitions per CreateTopics, closed-loop clients) are measured on each in
interleaved rounds (plaintext, secure, plaintext, ...) and the ratio printed.

`authorize`: `StandardAuthorizer.authorize` at N ACLs (literal and prefixed, on
topics and the cluster, for 50 principals), timed over allowed, denied and
no-ACL-applies checks.
"""

from __future__ import annotations

import argparse
import random
import shutil
import string
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from controller_bench import BROKERS, HEADER, Row, machine, measure

from controller.api.client import AdminClient
from controller.security.acl import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from controller.security.authorizer import (
    Action,
    AuthorizerConfig,
    StandardAuthorizer,
)

BENCH = "User:bench"
TOPIC_OPS = [Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
             Operation.ALTER_CONFIGS]


def filler_acls(count: int, seed: int = 7) -> list[AclBinding]:
    """`count` distinct bindings for 50 principals that are not the bench client."""
    rng = random.Random(seed)
    found: dict[AclBinding, None] = {}
    while len(found) < count:
        name = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 12)))
        pattern = rng.choice([PatternType.LITERAL, PatternType.PREFIXED])
        found[AclBinding(ResourceType.TOPIC, name, pattern, f"User:app-{rng.randrange(50)}",
                         "*", rng.choice(TOPIC_OPS),
                         rng.choice([Permission.ALLOW, Permission.ALLOW, Permission.DENY]))] = None
    return list(found)


def bench_acls() -> list[AclBinding]:
    return [AclBinding(ResourceType.TOPIC, "t", PatternType.PREFIXED, BENCH, "*",
                       Operation.CREATE, Permission.ALLOW),
            AclBinding(ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, PatternType.LITERAL, BENCH,
                       "*", Operation.DESCRIBE, Permission.ALLOW)]


# ------------------------------------------------------------------- authorize


class _Static:
    def __init__(self, bindings: Iterable[AclBinding]) -> None:
        self._bindings = list(bindings)

    def acl_version(self) -> int:
        return 1

    def acl_bindings(self) -> Iterable[AclBinding]:
        return self._bindings


def run_authorize(args: argparse.Namespace) -> None:
    acls = filler_acls(args.acls) + bench_acls()
    auth = StandardAuthorizer(AuthorizerConfig(frozenset({"User:admin"})), _Static(acls))
    t0 = time.perf_counter()
    auth.index()
    build_ms = (time.perf_counter() - t0) * 1e3
    rng = random.Random(3)
    names = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 40)))
             for _ in range(1000)]
    cases = {
        "allowed (prefix match, User:bench CREATE t*)":
            [(BENCH, Action(Operation.CREATE, ResourceType.TOPIC, "t" + n)) for n in names],
        "denied (no ALLOW for the principal)":
            [("User:nobody", Action(Operation.WRITE, ResourceType.TOPIC, n)) for n in names],
        "filler principal, random topic":
            [(f"User:app-{i % 50}", Action(Operation.READ, ResourceType.TOPIC, n))
             for i, n in enumerate(names)],
        "cluster DESCRIBE (literal)":
            [(BENCH, Action(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME))
             for _ in names],
    }
    print(f"# {machine()}")
    print(f"# {len(acls)} ACLs; index built in {build_ms:.1f} ms (once per ACL change)")
    print(f"{'case':48s} {'us/check':>9s}  allowed")
    for label, checks in cases.items():
        best = float("inf")
        allowed = 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            allowed = sum(auth.authorize(p, "10.0.0.1", a) for p, a in checks)
            best = min(best, (time.perf_counter() - t0) / len(checks))
        print(f"{label:48s} {best * 1e6:9.2f}  {allowed}/{len(checks)}")


# ---------------------------------------------------------------------- create


def start(root: Path, secure: bool) -> object:
    from tests.support.controller_processes import ControllerCluster
    from tests.support.polling import wait_until

    cluster = ControllerCluster(root, 3, secure=secure)
    cluster.start()
    cluster.register_brokers(list(range(1, BROKERS + 1)), timeout_s=30)
    wait_until(cluster.active_node, 15, "an active controller")
    if secure:
        acls = filler_acls(10_000) + bench_acls()
        with AdminClient(cluster.bootstrap, tls=cluster.credentials("admin"),
                         timeout_ms=60_000) as admin:
            for i in range(0, len(acls), 2000):
                errors = admin.create_acls(acls[i:i + 2000])
                assert all(e.ok for e in errors), [e for e in errors if not e.ok][:3]
            loaded = len(admin.describe_acls(AclFilter()))
        print(f"# secure cluster holds {loaded} ACLs", flush=True)
    return cluster


def run_create(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="security-bench-", dir=args.dir))
    clusters: dict[str, object] = {}
    try:
        clusters["plaintext"] = start(root / "plain", secure=False)
        clusters["tls+acl"] = start(root / "secure", secure=True)
        print(f"# {machine()}")
        print(f"# 2 clusters x 3 controllers, {BROKERS} brokers each, {args.seconds}s measured "
              f"after {args.warmup}s warm-up, {args.rounds} interleaved rounds")
        print(f"{'cluster':10s} " + HEADER)
        rows: dict[tuple[str, int, int], list[Row]] = {}
        for rnd in range(args.rounds):
            for partitions, clients in args.rows:
                for name, cluster in clusters.items():
                    tls = cluster.credentials("bench") if name != "plaintext" else None  # type: ignore[attr-defined]
                    row = measure(cluster, clients, partitions, args,  # type: ignore[arg-type]
                                  f"t{rnd}r{partitions}c{clients}", tls,
                                  profile_tag=f"{name}-r{rnd}")
                    rows.setdefault((name, partitions, clients), []).append(row)
                    print(row.line(f"{name:10s} "), flush=True)
        print("# summary (sum over rounds): tls+acl / plaintext")
        for partitions, clients in args.rows:
            plain = rows[("plaintext", partitions, clients)]
            secure = rows[("tls+acl", partitions, clients)]
            tput = sum(r.topics_per_s for r in secure) / sum(r.topics_per_s for r in plain)
            cpu = (sum(sum(r.ctrl_cpu_s) / max(r.topics_per_s, 1e-9) for r in secure)
                   / sum(sum(r.ctrl_cpu_s) / max(r.topics_per_s, 1e-9) for r in plain))
            print(f"#   {partitions:3d} partitions x {clients:2d} clients: throughput "
                  f"{tput:.3f} ({(1 - tput) * 100:+.1f}% lower), controller CPU per topic "
                  f"{cpu:.3f}x")
    finally:
        for cluster in clusters.values():
            cluster.close()  # type: ignore[attr-defined]
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def _rows(text: str) -> list[tuple[int, int]]:
    """"1x32,100x8": (partitions, clients) pairs."""
    return [(int(p), int(c)) for p, c in (item.split("x") for item in text.split(","))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create")
    create.add_argument("--dir", default=None)
    create.add_argument("--seconds", type=float, default=10.0)
    create.add_argument("--warmup", type=float, default=2.0)
    create.add_argument("--startup", type=float, default=4.0)
    create.add_argument("--procs", type=int, default=4)
    create.add_argument("--rounds", type=int, default=2)
    create.add_argument("--topics-per-request", type=int, default=1)
    create.add_argument("--rows", type=_rows, default=[(1, 32), (100, 8)],
                        help="PARTITIONSxCLIENTS,... (default 1x32,100x8)")
    create.add_argument("--keep", action="store_true")
    create.add_argument("--profile", default=None, metavar="DIR",
                        help="py-spy every controller over each window (as controller_bench)")
    auth = sub.add_parser("authorize")
    auth.add_argument("--acls", type=int, default=10_000)
    auth.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    {"create": run_create, "authorize": run_authorize}[args.command](args)


if __name__ == "__main__":
    main()
