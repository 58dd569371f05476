"""The metadata image as a file tree, for `metakraft shell` (kafka-metadata-shell's
layout, metakraft's content):

    /offset                      the image's last offset, and where it was read from
    /brokers/<id>                a broker's registration (JSON)
    /topics/<name>/id            a topic's id
    /topics/<name>/<partition>   a partition's replication state (JSON)
    /topicIds/<id>               the name of the topic with that id
    /configs/topic/<name>        dynamic configs (JSON); also broker/<id>, broker/_default
    /configs/cluster/_default      and cluster/_default
    /acls/<id>                   an ACL binding (JSON)
    /features/<name>             a finalized feature level
    /quorum/leader               the last leader change the image saw (JSON)
    /quorum/voters               the voter set in the log (JSON; absent for a static quorum)
    /tier/<kind>-<start>-<end>   an object of the remote tier (JSON)

Directories are listed on demand from the `MetadataState` (nothing is materialized
until read), so browsing a million partitions costs what is looked at.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from controller.cli.admin_output import to_jsonable
from controller.metadata import MetadataState
from controller.metadata.config_schema import ResourceType as ConfigResourceType
from controller.records.metadata_pb2 import LeaderChangeRecord, VotersRecord


@attrs.frozen
class File:
    read: Callable[[], str]


@attrs.frozen
class Dir:
    children: Callable[[], Mapping[str, Node]]


Node = File | Dir

# The name of the default (empty-named) broker and cluster config resource.
DEFAULT_RESOURCE = "_default"
_CONFIG_DIRS = {ConfigResourceType.TOPIC: "topic", ConfigResourceType.BROKER: "broker",
                ConfigResourceType.CLUSTER: "cluster"}


def as_json(value: Any) -> str:
    """JSON with one top-level field (or item) per line, each value compact: a
    partition's replica list stays on its line."""
    data = to_jsonable(value)
    if isinstance(data, dict) and data:
        fields = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items()]
        return "{\n" + ",\n".join(fields) + "\n}"
    if isinstance(data, list) and data:
        return "[\n" + ",\n".join(f"  {json.dumps(v)}" for v in data) + "\n]"
    return json.dumps(data)


def text_file(text: str) -> File:
    return File(lambda: text)


def json_file(value: Any) -> File:
    """A file showing `value` as JSON (rendered when read)."""
    return File(lambda: as_json(value))


def fixed_dir(children: Mapping[str, Node]) -> Dir:
    return Dir(lambda: children)


@attrs.define
class ImageSource:
    """A replayed image and what is known about it beside the state."""

    state: MetadataState
    # The last offset replayed (-1: nothing yet), and where the image came from.
    offset: int = -1
    description: str = ""
    leader_change: LeaderChangeRecord | None = None


def _leader_doc(source: ImageSource) -> dict[str, Any]:
    record = source.leader_change
    if record is None:
        return {"leader_id": None, "epoch": None}
    return {"leader_id": record.leader_id, "epoch": record.epoch,
            "voters": sorted(record.voters), "granting_voters": sorted(record.granting_voters)}


def _voters_doc(record: VotersRecord) -> list[dict[str, Any]]:
    return [{"node_id": v.node_id, "directory_id": v.directory_id, "endpoint": v.endpoint}
            for v in record.voters]


def root(source: ImageSource) -> Dir:
    state = source.state

    def topics() -> Mapping[str, Node]:
        return {t.name: _topic_dir(state, t.topic_id) for t in state.replication.list_topics()}

    def topic_ids() -> Mapping[str, Node]:
        return {t.topic_id: text_file(t.name) for t in state.replication.list_topics()}

    def brokers() -> Mapping[str, Node]:
        return {str(b.broker_id): json_file(b) for b in state.cluster.brokers()}

    def configs() -> Mapping[str, Node]:
        grouped: dict[str, dict[str, dict[str, str]]] = {d: {} for d in _CONFIG_DIRS.values()}
        for (kind, name, key), value in state.configs.all_configs().items():
            try:
                folder = _CONFIG_DIRS[ConfigResourceType(kind)]
            except ValueError:
                folder = f"type-{kind}"  # a resource type this version does not know
            grouped.setdefault(folder, {}).setdefault(name or DEFAULT_RESOURCE, {})[key] = value
        return {folder: fixed_dir({name: json_file(dict(sorted(values.items())))
                                   for name, values in sorted(entries.items())})
                for folder, entries in grouped.items()}

    def acls() -> Mapping[str, Node]:
        return {e.id: json_file(e.binding() or e) for e in state.access.entries()}

    def features() -> Mapping[str, Node]:
        return {name: text_file(str(level))
                for name, level in sorted(state.features.finalized_levels().items())}

    def quorum() -> Mapping[str, Node]:
        out: dict[str, Node] = {"leader": json_file(_leader_doc(source))}
        voters = state.quorum_voters.get()
        if voters is not None:
            out["voters"] = json_file(_voters_doc(voters))
        return out

    def tier() -> Mapping[str, Node]:
        return {f"{o.kind.value}-{o.start_offset}-{o.end_offset}": json_file(o)
                for o in state.tier.objects()}

    return Dir(lambda: {
        "offset": File(lambda: f"{source.offset} ({source.description})"),
        "brokers": Dir(brokers), "topics": Dir(topics), "topicIds": Dir(topic_ids),
        "configs": Dir(configs), "acls": Dir(acls), "features": Dir(features),
        "quorum": Dir(quorum), "tier": Dir(tier),
    })


def _topic_dir(state: MetadataState, topic_id: str) -> Dir:
    def children() -> Mapping[str, Node]:
        out: dict[str, Node] = {"id": text_file(topic_id)}
        for index, part in enumerate(state.replication.partitions(topic_id)):
            out[str(index)] = json_file(part)
        return out
    return Dir(children)


# ---------------------------------------------------------------- paths


class PathError(Exception):
    """A path that names nothing (or a file where a directory is needed)."""


def normalize(cwd: tuple[str, ...], path: str) -> tuple[str, ...]:
    """`path` (absolute, or relative to `cwd`) as components, `.` and `..` resolved."""
    parts = list(cwd) if not path.startswith("/") else []
    for piece in path.split("/"):
        if piece in ("", "."):
            continue
        if piece == "..":
            if parts:
                parts.pop()
        else:
            parts.append(piece)
    return tuple(parts)


def show(parts: tuple[str, ...]) -> str:
    return "/" + "/".join(parts)


def lookup(top: Dir, parts: tuple[str, ...]) -> Node:
    node: Node = top
    for i, name in enumerate(parts):
        if not isinstance(node, Dir):
            raise PathError(f"{show(parts[:i])}: not a directory")
        child = node.children().get(name)
        if child is None:
            raise PathError(f"{show(parts[:i + 1])}: no such file or directory")
        node = child
    return node


def expand(top: Dir, cwd: tuple[str, ...], pattern: str) -> list[tuple[str, ...]]:
    """The paths `pattern` names; its components may hold globs (`*`, `?`, `[..]`).
    PathError when nothing matches."""
    wanted = normalize(cwd, pattern)
    matches: list[tuple[tuple[str, ...], Node]] = [((), top)]
    for piece in wanted:
        nxt: list[tuple[tuple[str, ...], Node]] = []
        for parts, node in matches:
            if not isinstance(node, Dir):
                continue
            children = node.children()
            if any(c in piece for c in "*?["):
                nxt.extend(((*parts, name), children[name])
                           for name in sorted_names(list(children))
                           if fnmatch.fnmatchcase(name, piece))
            elif piece in children:
                nxt.append(((*parts, piece), children[piece]))
        matches = nxt
    if not matches:
        if not any(c in pattern for c in "*?["):
            lookup(top, wanted)  # raises the precise error for a plain path
        raise PathError(f"{show(wanted)}: no match")
    return [parts for parts, _node in matches]


def walk(node: Node, parts: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Node]]:
    """`node` and everything below it, depth first, children by name."""
    yield parts, node
    if isinstance(node, Dir):
        for name, child in sorted(node.children().items(), key=lambda kv: _sort_key(kv[0])):
            yield from walk(child, (*parts, name))


def _sort_key(name: str) -> tuple[int, int, str]:
    """Numbers in numeric order (partitions 0, 1, 2, ..., 10), then names."""
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def sorted_names(names: Iterator[str] | list[str]) -> list[str]:
    return sorted(names, key=_sort_key)
