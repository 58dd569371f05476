"""`metakraft shell` against real controller processes (mutual TLS, a directory tier,
small segments and snapshots): the tree it shows from a snapshot file, a log
directory, the tier (alone and with a log directory, at an offset) and a live quorum
is the one `topics describe` reports, and a live shell follows new commits.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from controller.api.client import AdminClient
from controller.cli.admin_output import to_jsonable
from controller.metadata import CreatableTopic
from controller.storage import snapshot_file as sf
from controller.storage.meta_properties import DataDir
from controller.tier.history import list_tier
from controller.tier.remote import open_store
from tests.support.controller_processes import ControllerCluster
from tests.support.dev_cluster import dev_command, dev_env
from tests.support.polling import wait_until
from tests.support.processes import REPO_ROOT
from tests.support.tiered_cluster import tier_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def shell(cluster: ControllerCluster, *args: str, command: str) -> subprocess.CompletedProcess[str]:
    assert cluster.pki is not None
    env = {**dev_env(), "METAKRAFT_COMMAND_CONFIG": str(cluster.pki.command_config("admin"))}
    return subprocess.run(dev_command("shell", *args, "-c", command), cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def json_docs(text: str) -> list[Any]:
    decoder = json.JSONDecoder()
    docs, pos = [], 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        doc, pos = decoder.raw_decode(text, pos)
        docs.append(doc)
    return docs


def tree_of(cluster: ControllerCluster, *source: str) -> dict[str, list[Any]]:
    """Each topic's partitions as the shell shows them from `source`, in one call:
    the paths (`find`), then every partition file (`cat`, in the same order)."""
    done = shell(cluster, *source, command="find /topics; cat /topics/*/[0-9]*")
    assert done.returncode == 0, done.stderr
    paths, _, docs = done.stdout.partition("\n{")
    partitions = [p.split("/")[2:] for p in paths.splitlines() if p.count("/") == 3]
    partitions = [(topic, index) for topic, index in partitions if index.isdigit()]
    values = json_docs("{" + docs) if docs else []
    assert len(values) == len(partitions), done.stdout
    out: dict[str, list[Any]] = {}
    for (topic, _index), value in zip(partitions, values, strict=True):
        out.setdefault(topic, []).append(value)
    for topic in (p.split("/")[2] for p in paths.splitlines() if p.count("/") == 3):
        out.setdefault(topic, [])
    return out


def offset_of(cluster: ControllerCluster, *source: str) -> int:
    done = shell(cluster, *source, command="cat /offset")
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[0])


def test_shell_shows_what_topics_describe_does_from_every_source(tmp_path: Path) -> None:
    tier_url = (tmp_path / "tier").as_uri()
    cluster = ControllerCluster(tmp_path, 3, snapshot_interval_bytes=16 * 1024, secure=True,
                                extra_config=tier_config(tier_url, metrics=False))
    tls = cluster.credentials("admin")
    try:
        cluster.start()
        wait_until(cluster.active_node, 20, "an active controller")
        cluster.register_brokers([1, 2, 3])
        live = ("--bootstrap", ",".join(cluster.bootstrap))
        with AdminClient(cluster.bootstrap, tls=tls) as admin:
            assert admin.create_topics([CreatableTopic("orders", 3, 3)])[0].error.ok
            orders_offset = offset_of(cluster, *live)
            bulk = [CreatableTopic(f"bulk-{i}", 8, 3) for i in range(30)]
            assert all(r.error.ok for r in admin.create_topics(bulk))
            assert admin.create_topics([CreatableTopic("later", 2, 3)])[0].error.ok
            described = {t.name: [to_jsonable(p.registration) for p in t.partitions]
                         for t in admin.describe_topics()}
        data_dir = cluster.nodes[min(cluster.nodes)].data_dir
        store = open_store(tier_url)
        wait_until(lambda: sf.latest_snapshot(DataDir(data_dir).snapshot_dir), 30,
                   "a local snapshot")
        wait_until(lambda: (ls := list_tier(store, cluster.cluster_id)).snapshots
                   and ls.segments and ls.segments[-1].end_offset > orders_offset, 60,
                   "a snapshot and segments in the tier")

        # Live, the log directory, and tier + log directory: the whole tree.
        assert tree_of(cluster, *live) == described
        log_dir = ("--log-dir", str(data_dir))
        assert tree_of(cluster, *log_dir) == described
        assert tree_of(cluster, "--tier", tier_url, *log_dir) == described
        # The tier alone (from its newest snapshot) ends where its objects end: what it
        # holds is what was described.
        from_tier = tree_of(cluster, "--tier", tier_url)
        assert "orders" in from_tier
        assert all(described[n] == parts for n, parts in from_tier.items())
        # At an offset: the image as it was when only "orders" existed.
        at = tree_of(cluster, "--tier", tier_url, *log_dir,
                     "--at-offset", str(orders_offset))
        assert at == {"orders": described["orders"]}
        assert offset_of(cluster, "--tier", tier_url, "--at-offset",
                         str(orders_offset)) == orders_offset
        # A snapshot file: the topics it holds, as described.
        snapshot = sf.latest_snapshot(DataDir(data_dir).snapshot_dir)
        assert snapshot is not None
        snap = ("--snapshot", str(DataDir(data_dir).snapshot_dir / snapshot.file_name))
        assert offset_of(cluster, *snap) == snapshot.end_offset - 1
        from_snapshot = tree_of(cluster, *snap)
        assert "orders" in from_snapshot
        assert all(described[n] == parts for n, parts in from_snapshot.items())

        # Bad input: a path that names nothing fails the command, exit 1.
        missing = shell(cluster, *log_dir, command="cat /topics/nope/0")
        assert missing.returncode == 1
        assert "/topics/nope: no such file or directory" in missing.stderr
        beyond = shell(cluster, *log_dir, "--at-offset", str(10**9), command="ls")
        assert beyond.returncode == 3 and "before --at-offset" in beyond.stderr

        follow_live(cluster, live)
    finally:
        cluster.close()


def _next_line(lines: queue.Queue[str], deadline: float, seen: list[str]) -> str:
    try:
        return lines.get(timeout=max(0.01, deadline - time.monotonic())).strip()
    except queue.Empty:
        raise AssertionError(f"the live shell stopped answering (so far: {seen})") from None


def follow_live(cluster: ControllerCluster, live: tuple[str, ...]) -> None:
    """A live shell reading commands from a pipe sees a topic created after it started."""
    assert cluster.pki is not None
    env = {**dev_env(), "METAKRAFT_COMMAND_CONFIG": str(cluster.pki.command_config("admin"))}
    proc = subprocess.Popen(dev_command("shell", *live), cwd=REPO_ROOT, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or ()],
                     daemon=True).start()
    assert proc.stdin is not None
    try:
        def sees(name: str) -> bool:
            """Whether `ls /topics` lists `name`; a `pwd` after it ("/") marks the end of
            its answer (the first answer waits for the shell to start and catch up)."""
            assert proc.stdin is not None
            proc.stdin.write("ls /topics\npwd\n")
            proc.stdin.flush()
            seen: list[str] = []
            deadline = time.monotonic() + 60
            while (line := _next_line(lines, deadline, seen)) != "/":
                seen.append(line)
            return f"{name}/" in seen

        assert sees("orders")
        assert not sees("fresh")
        with AdminClient(cluster.bootstrap, tls=cluster.credentials("admin")) as admin:
            assert admin.create_topics([CreatableTopic("fresh", 1, 3)])[0].error.ok
        wait_until(lambda: sees("fresh"), 20, "the live shell to show the new topic")
        proc.stdin.write("exit\n")
        proc.stdin.flush()
        assert proc.wait(20) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
