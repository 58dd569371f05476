"""`metakraft produce` and `metakraft consume`: records in and out of partition logs.

Both take the controllers' addresses (`--bootstrap`), learn the partition leaders
from them, and talk to the brokers' PartitionData service (the same client
certificate as the admin commands, `--command-config`).

produce: one record per input line (stdin, or `--value` repeated); `--key-separator
SEP` splits `key SEP value`; records go to `--partition`, else to the partition of
their key (CRC-32C of the key modulo the partition count), else partition 0.
Idempotent, `--acks all` by default; prints each batch's partition and offsets.

consume: every committed record of a partition from `--offset` (or
`--from-beginning`), then stops at the high watermark, or keeps following with
`--follow`; `--output json` prints one JSON object per record.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterable

import click

from broker_agent.replica.client import (
    ACKS_ALL,
    ConsumedRecord,
    Consumer,
    DataClientError,
    Producer,
)
from broker_agent.replica.records import DataRecord
from controller.api.client import AdminClient
from controller.cli.admin_output import EXIT_ITEM_FAILED, AdminOptions, admin_options, run_admin

_ACKS = {"0": 0, "1": 1, "all": ACKS_ALL, "-1": ACKS_ALL}
# Records sent per batch when reading lines.
_LINES_PER_BATCH = 100


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode("ascii")


def _records(lines: Iterable[str], separator: str | None) -> Iterable[DataRecord]:
    for line in lines:
        line = line.rstrip("\n")
        if separator is not None and separator in line:
            key, _, value = line.partition(separator)
            yield DataRecord(key.encode(), value.encode())
        else:
            yield DataRecord(None, line.encode())


@click.command()
@click.option("--topic", required=True)
@click.option("--partition", type=click.IntRange(min=0), default=None,
              help="Every record to this partition (default: by key, else 0).")
@click.option("--value", "values", multiple=True,
              help="A record value (repeat); without it, one record per stdin line.")
@click.option("--key-separator", default=None,
              help="Split each line (or --value) into key SEP value.")
@click.option("--acks", type=click.Choice(sorted(_ACKS)), default="all", show_default=True,
              help="0: do not wait; 1: the leader fsynced; all: every in-sync replica has it.")
@admin_options
def produce(opts: AdminOptions, topic: str, partition: int | None, values: tuple[str, ...],
            key_separator: str | None, acks: str) -> None:
    """Append records to a topic's partition logs."""
    def action(admin: AdminClient) -> int:
        lines: Iterable[str] = values if values else sys.stdin
        failed = 0
        with Producer(admin, tls=opts.tls, acks=_ACKS[acks], timeout_ms=opts.timeout_ms) as producer:
            pending: dict[int, list[DataRecord]] = {}

            def flush(target: int) -> None:
                nonlocal failed
                batch = pending.pop(target, [])
                if not batch:
                    return
                try:
                    answer = producer.send(topic, batch, partition=target)
                except DataClientError as exc:
                    click.echo(f"error: {topic}-{target}: {exc}", err=True)
                    failed += 1
                    return
                row = {"topic": topic, "partition": target, "records": len(batch),
                       "base_offset": answer.base_offset, "leader": answer.leader_id,
                       "leader_epoch": answer.leader_epoch, "duplicate": answer.duplicate}
                if opts.json:
                    click.echo(json.dumps(row))
                else:
                    last = answer.base_offset + len(batch) - 1 if answer.base_offset >= 0 else -1
                    click.echo(f"{topic}-{target}: {len(batch)} record(s) at offsets "
                               f"{answer.base_offset}..{last} (leader {answer.leader_id}, "
                               f"epoch {answer.leader_epoch})")

            try:
                for record in _records(lines, key_separator):
                    target = partition if partition is not None else \
                        producer.partition_for(topic, record.key)
                    pending.setdefault(target, []).append(record)
                    if len(pending[target]) >= _LINES_PER_BATCH:
                        flush(target)
                for target in list(pending):
                    flush(target)
            except DataClientError as exc:
                click.echo(f"error: {exc}", err=True)
                return EXIT_ITEM_FAILED
        return EXIT_ITEM_FAILED if failed else 0

    run_admin(opts, action)


def _render(record: ConsumedRecord, as_json: bool) -> str:
    if as_json:
        return json.dumps({"topic": record.topic, "partition": record.partition,
                           "offset": record.offset, "key": _text(record.record.key),
                           "value": _text(record.record.value),
                           "timestamp_ms": record.record.timestamp_ms,
                           "leader_epoch": record.leader_epoch,
                           "append_time_ms": record.append_time_ms})
    key = _text(record.record.key)
    value = _text(record.record.value)
    return f"{record.offset}\t{value}" if key is None else f"{record.offset}\t{key}\t{value}"


@click.command()
@click.option("--topic", required=True)
@click.option("--partition", type=click.IntRange(min=0), default=None,
              help="One partition (default: every partition, one after the other).")
@click.option("--offset", type=click.IntRange(min=0), default=None,
              help="Start here (default: the high watermark, i.e. only new records).")
@click.option("--from-beginning", is_flag=True, help="Start at the log start.")
@click.option("--follow", is_flag=True, help="Keep waiting for new records (Ctrl-C stops).")
@click.option("--max-records", type=click.IntRange(min=1), default=None,
              help="Stop after this many records.")
@admin_options
def consume(opts: AdminOptions, topic: str, partition: int | None, offset: int | None,
            from_beginning: bool, follow: bool, max_records: int | None) -> None:
    """Print a topic's committed records (offset, key, value; or JSON lines)."""
    def action(admin: AdminClient) -> int:
        printed = 0
        with Consumer(admin, tls=opts.tls, timeout_ms=opts.timeout_ms) as consumer:
            try:
                partitions = [partition] if partition is not None else \
                    list(range(consumer.partition_count(topic)))
                if follow and len(partitions) != 1:
                    raise click.UsageError("--follow reads one partition: give --partition")
                for target in partitions:
                    offsets = consumer.offsets(topic, target)
                    start = offsets.log_start_offset if from_beginning else \
                        offset if offset is not None else offsets.high_watermark
                    for record in consumer.read(topic, target, start, follow=follow):
                        click.echo(_render(record, opts.json))
                        printed += 1
                        if max_records is not None and printed >= max_records:
                            return 0
            except DataClientError as exc:
                click.echo(f"error: {exc}", err=True)
                return EXIT_ITEM_FAILED
            except KeyboardInterrupt:
                return 0
        return 0

    run_admin(opts, action)
