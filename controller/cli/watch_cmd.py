"""`metakraft watch`: follow the metadata log's committed changes, decoded.

One line per change (table output), or one JSON object per line (`--output json`:
the event's fields and the record). Runs until interrupted, `--max-events`, or
with `--until-caught-up` once it has shown everything committed when it started
(the offset a linearizable read names then).
The watch resumes by itself at another controller when one dies, stops or cuts it
off (`Watcher`); the resumptions are noted on stderr.
"""

from __future__ import annotations

import datetime
import json
import sys

import click

from controller.api import admin_pb2 as apb
from controller.api.client import AdminClient
from controller.api.watch_client import Watcher, WatchFailedError
from controller.cli.admin_output import (
    EXIT_ITEM_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    AdminOptions,
    admin_options,
    run_admin,
)
from controller.watch.events import Kind

_KINDS = {kind.name.lower(): kind for kind in Kind}


def _time(ms: int) -> str:
    if ms <= 0:  # the voter set a dynamic quorum was formatted with: no append time
        return f"{'-':<24}"
    moment = datetime.datetime.fromtimestamp(ms / 1e3, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def event_line(event: apb.WatchEvent) -> str:
    """One change for people: offset, time, what, who, and the record's fields."""
    kind = Kind(event.resource_type).name.lower()
    about = event.resource_name or event.topic_id
    if event.partition >= 0:
        about = f"{about}-{event.partition}"
    fields = json.loads(event.record_json).get("fields", {})
    who = f" by {event.principal}" if event.principal else ""
    return (f"{event.offset:>8} {_time(event.append_time_ms)} {kind:<9} "
            f"{event.record_type} {about}{who} {json.dumps(fields, separators=(',', ':'))}")


def event_json(event: apb.WatchEvent) -> str:
    return json.dumps({
        "offset": event.offset, "append_time_ms": event.append_time_ms,
        "leader_epoch": event.leader_epoch, "principal": event.principal,
        "request_id": event.request_id,
        "resource_type": Kind(event.resource_type).name.lower(),
        "record_type": event.record_type, "resource_name": event.resource_name,
        "topic_id": event.topic_id, "partition": event.partition,
        "record": json.loads(event.record_json)}, separators=(",", ":"))


@click.command()
@click.option("--from-offset", type=click.IntRange(min=0), default=None,
              help="The first offset to show (0: the whole history the cluster holds, "
                   "from the tier if it has one). Default: now. To resume, give the last "
                   "'next offset' printed.")
@click.option("--type", "types", multiple=True, type=click.Choice(sorted(_KINDS)),
              help="Only these resource types; repeatable. Default: all but internal.")
@click.option("--topic", default="", help="Only this topic's changes.")
@click.option("--topic-prefix", default="", help="Only changes of topics named so.")
@click.option("--max-events", type=click.IntRange(min=1), default=None,
              help="Stop after this many changes.")
@click.option("--until-caught-up", is_flag=True,
              help="Stop once everything committed when the command started is shown.")
@click.option("--progress", is_flag=True,
              help="Print progress (next offset, committed end) on stderr.")
@admin_options
def watch(opts: AdminOptions, from_offset: int | None, types: tuple[str, ...], topic: str,
          topic_prefix: str, max_events: int | None, until_caught_up: bool,
          progress: bool) -> None:
    """Follow the metadata log: every committed change, decoded, as it commits.

    Needs DESCRIBE on the topics shown, and on the cluster for brokers, ACLs, the
    quorum and features. Exit 0 when stopped by --max-events / --until-caught-up,
    1 when the controllers refuse the watch (an offset out of range, denied), 3 when
    none serves it.
    """
    if topic and topic_prefix:
        raise click.UsageError("give --topic or --topic-prefix, not both")

    def action(client: AdminClient) -> int:
        # "Everything committed now": a linearizable read names that offset (a
        # standby serving the watch may not have heard of the newest commits yet).
        target = None
        if until_caught_up:
            client.describe_cluster()
            target = client.last_read_offset
        watcher = Watcher(client, from_offset=from_offset,
                          resource_types=[_KINDS[t].value for t in types], topic=topic,
                          topic_prefix=topic_prefix)
        shown, resumptions = 0, 0
        try:
            for update in watcher:
                for event in update.events:
                    click.echo(event_json(event) if opts.json else event_line(event))
                    shown += 1
                    if max_events is not None and shown >= max_events:
                        return EXIT_OK
                if watcher.resumptions > resumptions:
                    resumptions = watcher.resumptions
                    click.echo(f"(resumed at {update.controller} from offset "
                               f"{update.next_offset} after: {watcher.faults[-1]})", err=True)
                if progress:
                    click.echo(f"(next offset {update.next_offset}, committed "
                               f"{update.committed_offset} at {update.controller})", err=True)
                if target is not None and update.next_offset >= target:
                    return EXIT_OK
        except WatchFailedError as exc:
            click.echo(f"error: {exc}", err=True)
            return EXIT_ITEM_FAILED if exc.code is not None else EXIT_UNREACHABLE
        except KeyboardInterrupt:
            click.echo(f"(stopped; resume with --from-offset {watcher.next_offset})",
                       err=True)
            return EXIT_OK
        finally:
            watcher.close()
            sys.stdout.flush()
        return EXIT_OK

    run_admin(opts, action)
