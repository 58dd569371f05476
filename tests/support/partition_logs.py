"""Helpers of the real-process data-plane tests: a replicated topic ready to take
records, its leader, and what a broker's partition log holds on disk."""

from __future__ import annotations

import os

from broker_agent.replica.client import Consumer
from broker_agent.replica.records import decode_record
from controller.api.client import AdminClient
from controller.logformat.batch import decode_batch
from controller.logformat.errors import StorageError
from controller.metadata import CreatableTopic
from controller.storage.segment import iter_stored_batches, parse_segment_file_name
from tests.support.broker_processes import BrokerCluster
from tests.support.polling import wait_until


def create(admin: AdminClient, name: str, partitions: int = 1) -> None:
    result = admin.create_topics([CreatableTopic(name, partitions, 3)])[0]
    assert result.error.ok, result.error
    wait_until(lambda: all(p.registration.leader >= 0
                           for p in admin.describe_topics([name])[0].partitions),
               10, f"{name} has leaders")
    # The leaders' brokers know it too (a consumer's call retries until they do).
    with Consumer(admin, timeout_ms=20_000) as consumer:
        for partition in range(partitions):
            consumer.offsets(name, partition)


def leader_of(admin: AdminClient, topic: str, partition: int = 0) -> tuple[int, int]:
    reg = admin.describe_topics([topic])[0].partitions[partition].registration
    return reg.leader, reg.leader_epoch


def stored_values(cluster: BrokerCluster, broker_id: int, topic: str,
                  partition: int = 0) -> list[str]:
    """What one broker's partition log holds, read from its segment files (batches
    verified by CRC; a torn tail ends the read)."""
    directory = cluster.brokers[broker_id].data_dir / "partition-logs" / f"{topic}-{partition}"
    out: list[str] = []
    if not directory.exists():
        return out
    for path in sorted(directory.iterdir()):
        if parse_segment_file_name(path.name) is None:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            for _, header, buf, rel in iter_stored_batches(fd, 0, size):
                batch, _ = decode_batch(buf, rel, verified=header)
                out.extend(decode_record(body).value.decode() for body in batch.records)
        except StorageError:
            pass  # a batch being written: the prefix read so far is what is compared
        finally:
            os.close(fd)
    return out
