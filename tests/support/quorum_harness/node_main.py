"""A bare Raft quorum node, for tests and bench/raft_bench.py (not the controller).

    python -m tests.support.quorum_harness.node_main --node-id 1 \\
        --voters 1=127.0.0.1:9001,2=127.0.0.1:9002,3=127.0.0.1:9003 \\
        --data-dir /tmp/n1 --cluster-id <22-char id> [--listen 127.0.0.1:9001] [--format]

One gRPC server serves the Raft service, the test-only QuorumHarness service
(harness.proto), health and reflection. A voter listens on its own address from
--voters unless --listen says otherwise; an observer (a node id not among the
voters) needs --listen (port 0 picks one). Once serving it prints one line
`node <id> serving on <host:port>` to stdout. SIGTERM or SIGINT stops it cleanly
(a leader hands over first); exit status 1 if the Raft node failed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from controller.quorum.driver import RaftDriver
from controller.quorum.driver_config import DriverConfig, parse_voters
from controller.quorum.service import add_raft_service
from controller.rpc import add_health_and_reflection, bind, create_server
from controller.storage.meta_properties import format_data_dir
from tests.support.quorum_harness.harness import add_harness_service

logger = logging.getLogger("tests.support.quorum_harness.node_main")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.support.quorum_harness.node_main",
                                description=__doc__.splitlines()[0])
    p.add_argument("--node-id", type=int, required=True)
    p.add_argument("--voters", type=parse_voters, required=True,
                   help="ID=HOST:PORT,... of every voter")
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--cluster-id", required=True)
    p.add_argument("--listen", help="HOST:PORT to serve on (default: own voter address)")
    p.add_argument("--format", action="store_true",
                   help="format the data dir first if it is not formatted yet")
    p.add_argument("--election-timeout-ms", type=int)
    p.add_argument("--fetch-max-wait-ms", type=int)
    p.add_argument("--request-timeout-ms", type=int)
    p.add_argument("--check-quorum-timeout-ms", type=int)
    p.add_argument("--log-level", default="WARNING")
    return p.parse_args(argv)


def build_config(args: argparse.Namespace) -> DriverConfig:
    overrides = {name: getattr(args, name) for name in
                 ("election_timeout_ms", "fetch_max_wait_ms", "request_timeout_ms",
                  "check_quorum_timeout_ms") if getattr(args, name) is not None}
    return DriverConfig(node_id=args.node_id, cluster_id=args.cluster_id,
                        voter_addresses=args.voters, data_dir=args.data_dir, **overrides)


async def serve(args: argparse.Namespace) -> int:
    config = build_config(args)
    listen = args.listen or config.voter_addresses.get(config.node_id)
    if listen is None:
        raise SystemExit("an observer needs --listen HOST:PORT")
    if args.format:
        format_data_dir(config.data_dir, config.cluster_id, config.node_id,
                        ignore_formatted=True)
    driver = RaftDriver(config)
    server = create_server(config.rpc_limits)
    port = bind(server, listen, None)
    names = [add_raft_service(server, driver), add_harness_service(server, driver)]
    add_health_and_reflection(server, names)
    await driver.start()
    await server.start()
    host = listen.rpartition(":")[0]
    print(f"node {config.node_id} serving on {host}:{port}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stop_wait = asyncio.create_task(stop.wait())
    failed_wait = asyncio.create_task(driver.stopped.wait())
    await asyncio.wait([stop_wait, failed_wait], return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    failed_wait.cancel()
    await driver.stop(resign=True)
    await server.stop(grace=0.5)
    if driver.failure is not None:
        logger.error("raft node failed: %r", driver.failure)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return asyncio.run(serve(args))


if __name__ == "__main__":
    raise SystemExit(main())
