"""A 3-controller cluster (real processes) with a remote tier, small segments and
snapshots, and a writer thread creating and deleting topics whose acknowledged
history the tests compare the tier + local logs with."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from controller.api.client import AdminClient
from controller.metadata import CreatableTopic, ErrorCode
from controller.records import decode_record, record_type
from controller.tier.history import history_batches, list_tier, local_segments, plan_history
from controller.tier.remote import RemoteStorage
from tests.support.controller_processes import ControllerCluster, ControllerProcess


def tier_config(url: str, *, segment_ms: int = 400, copy_timeout_ms: int = 3_000,
                local_retention_ms: int = 0, metrics: bool = True) -> str:
    return (f"[log]\nsegment_ms = {segment_ms}\n"
            f'[tier]\nurl = "{url}"\ncopy_interval_ms = 100\n'
            f"copy_timeout_ms = {copy_timeout_ms}\nmax_backoff_ms = 1000\n"
            f"local_retention_ms = {local_retention_ms}\n"
            + ('[metrics]\naddress = "127.0.0.1"\nport = 0\n' if metrics else ""))


def scrape(node: ControllerProcess) -> dict[str, float]:
    """The node's Prometheus metrics (its exporter's port is in its log)."""
    import re
    import urllib.request

    # The log is appended to across restarts: the last exporter is this process's.
    found = re.findall(r"event=metrics_serving address=([\d.]+:\d+)", node.log_text())
    assert found, "no metrics exporter"
    with urllib.request.urlopen(f"http://{found[-1]}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


class Writer(threading.Thread):
    """Creates topics w0, w1, ... (deleting every third one right after) until
    stopped; `created` / `deleted` hold the acknowledged ones only."""

    def __init__(self, bootstrap: Sequence[str]) -> None:
        super().__init__(daemon=True)
        self.bootstrap = list(bootstrap)
        self.stop_event = threading.Event()
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.errors = 0

    def run(self) -> None:
        i = 0
        with AdminClient(self.bootstrap, timeout_ms=10_000) as admin:
            while not self.stop_event.is_set():
                name = f"w{i}"
                i += 1
                try:
                    result = admin.create_topics([CreatableTopic(name, 4, 3)])[0]
                    if result.error.code is ErrorCode.NONE:
                        self.created.append(name)
                    if i % 3 == 0 and name in self.created:
                        deleted = admin.delete_topics([name])[0]
                        if deleted.error.code is ErrorCode.NONE:
                            self.deleted.append(name)
                except Exception:
                    self.errors += 1  # a failover: this one's outcome is not counted

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)


def topic_history(store: RemoteStorage | None, data_dir: Path) -> tuple[list[str], list[str],
                                                                        int]:
    """(topics created, topic ids removed, records) in the whole history: tier objects
    then the local log of `data_dir` (read from disk: the process must be stopped)."""
    listing = list_tier(store) if store is not None else None
    pieces = plan_history(listing.segments if listing else (), local_segments(data_dir))
    assert pieces and pieces[0].start == 0, pieces[:1]
    created: list[str] = []
    removed: list[str] = []
    count = 0
    for piece, batch in history_batches(store, pieces):
        for i, data in enumerate(batch.records):
            if not piece.start <= batch.base_offset + i < piece.end:
                continue
            count += 1
            record = decode_record(data)
            kind = record_type(record)
            if kind == "topic":
                created.append(record.topic.name)
            elif kind == "remove_topic":
                removed.append(record.remove_topic.topic_id)
    return created, removed, count


def start_cluster(root: Path, tier_url: str, env: dict[str, str] | None = None,
                  **tier_options: int) -> ControllerCluster:
    cluster = ControllerCluster(root, 3, snapshot_interval_bytes=16 * 1024,
                                extra_config=tier_config(tier_url, **tier_options), env=env)
    cluster.start()
    return cluster


def count_lines(node: ControllerProcess, event: str) -> int:
    return node.log_text().count(f"event={event} ")


def copy_in_flight(node: ControllerProcess) -> bool:
    """Whether the node's newest copy started (COPY_STARTED committed) and has neither
    finished nor been cleaned up, by its log."""
    import re

    text = node.log_text()
    started = re.findall(r"event=tier_copy_started id=(\w+)", text)
    if not started:
        return False
    last = started[-1]
    return (f"event=tier_object_copied id={last}" not in text
            and f"event=tier_object_deleted id={last}" not in text)
