"""What a remote object is: its name, its manifest, and how to check it.

Layout under the tier root:

    cluster.json                                         {"cluster_id": ...}: whose tier
    log/<start:020d>-<end:020d>-<id>.log                 batches [start, end), as stored
    log/<start:020d>-<end:020d>-<id>.manifest            JSON, see below
    snapshots/<end:020d>-<epoch:010d>-<id>.checkpoint    a snapshot file, as written
    snapshots/<end:020d>-<epoch:010d>-<id>.manifest

An object is complete when its manifest exists: the data is put first and the
manifest last; a delete removes the manifest first. Readers go by manifests only, so
a half-copied object is never read. The manifest holds the data's size and CRC-32C,
an offset index (offset -> byte position, sparse), a time index (append time ->
first offset at or after it, sparse), the slice of the leader-epoch history the
range covers, and a CRC-32C of itself.

From metadata.version 9 (manifest format 2) a manifest also holds the SHA-256 of its
data and, for a log object, the SHA-256 of the previous log object's manifest: the
log objects form a hash chain, and the log records each manifest's SHA-256 before the
upload (`controller.tier.chain` checks all of it). CRC-32C finds damage; the hashes
find replacement.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import attrs
import crc32c

from controller.logformat.batch import peek_batch_header, verify_batch
from controller.storage.errors import CorruptBatchError
from controller.tier.remote import TierError

# 1: CRC-32C only; 2: with the SHA-256 fields (metadata.version 9). Both are read.
FORMAT_VERSION = 2
_FORMAT_VERSIONS = (1, 2)
CLUSTER_MARKER = "cluster.json"
LOG_PREFIX = "log/"
SNAPSHOT_PREFIX = "snapshots/"
MANIFEST_SUFFIX = ".manifest"
# One index entry per this many bytes of batches (as the local segments do).
INDEX_INTERVAL_BYTES = 4096

_LOG_NAME = re.compile(r"^log/(\d{20})-(\d{20})-([0-9a-f]{32})\.(log|manifest)$")
_SNAPSHOT_NAME = re.compile(r"^snapshots/(\d{20})-(\d{10})-([0-9a-f]{32})\.(checkpoint|manifest)$")


class CorruptObjectError(TierError):
    """A remote object that fails a check; names the object and the offset."""

    def __init__(self, key: str, reason: str, offset: int | None = None) -> None:
        self.key = key
        self.reason = reason
        self.offset = offset
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"remote object {key}{where}: {reason}")


def data_key(kind: str, start: int, end: int, segment_id: str, epoch: int = 0) -> str:
    if kind == "segment":
        return f"{LOG_PREFIX}{start:020d}-{end:020d}-{segment_id}.log"
    return f"{SNAPSHOT_PREFIX}{end:020d}-{epoch:010d}-{segment_id}.checkpoint"


def manifest_key(data_key_: str) -> str:
    return data_key_.rsplit(".", 1)[0] + MANIFEST_SUFFIX


def parse_key(key: str) -> tuple[str, str, bool] | None:
    """(kind, segment id, is manifest) of a key the tier may hold, None if foreign."""
    if m := _LOG_NAME.match(key):
        return "segment", m.group(3), m.group(4) == "manifest"
    if m := _SNAPSHOT_NAME.match(key):
        return "snapshot", m.group(3), m.group(4) == "manifest"
    return None


@attrs.frozen
class Manifest:
    cluster_id: str
    segment_id: str
    kind: str  # "segment" or "snapshot"
    start_offset: int
    end_offset: int
    size_bytes: int
    data_crc32c: int
    start_time_ms: int
    end_time_ms: int
    last_epoch: int
    # (epoch, start offset) of each epoch with batches in the range.
    epochs: tuple[tuple[int, int], ...] = ()
    # (offset, byte position) and (append time ms, offset), sparse, ascending.
    offset_index: tuple[tuple[int, int], ...] = ()
    time_index: tuple[tuple[int, int], ...] = ()
    copier_id: int = -1
    copier_epoch: int = -1
    # Format 2: the SHA-256 (hex) of the data, and of the previous log object's
    # manifest ("" for the first object of the chain, and on snapshots).
    data_sha256: str = ""
    prev_manifest_sha256: str = ""

    @property
    def hashed(self) -> bool:
        """Format 2: on the hash chain (written at metadata.version 9)."""
        return bool(self.data_sha256)

    @property
    def data_key(self) -> str:
        return data_key(self.kind, self.start_offset, self.end_offset, self.segment_id,
                        self.last_epoch)

    @property
    def manifest_key(self) -> str:
        return manifest_key(self.data_key)

    def encode(self) -> bytes:
        """The canonical bytes (what `sha256` hashes): a decoded manifest encodes to
        the bytes it was decoded from, whatever its format."""
        body = attrs.asdict(self)
        if self.hashed:
            body["format_version"] = 2
        else:
            # Format 1 has no SHA-256 fields.
            del body["data_sha256"], body["prev_manifest_sha256"]
            body["format_version"] = 1
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return json.dumps({"crc32c": crc32c.crc32c(text.encode()), "manifest": text}
                          ).encode() + b"\n"

    @classmethod
    def decode(cls, key: str, data: bytes) -> Manifest:
        try:
            outer = json.loads(data)
            text = outer["manifest"]
            if crc32c.crc32c(text.encode()) != outer["crc32c"]:
                raise CorruptObjectError(key, "manifest CRC-32C mismatch")
            body: dict[str, Any] = json.loads(text)
            version = body.pop("format_version")
            if version not in _FORMAT_VERSIONS:
                raise CorruptObjectError(key, f"unknown manifest format version {version!r}")
            if version == 1 and ("data_sha256" in body or "prev_manifest_sha256" in body):
                raise CorruptObjectError(key, "a format 1 manifest with SHA-256 fields")
            if version == 2 and not body.get("data_sha256"):
                raise CorruptObjectError(key, "a format 2 manifest without its data SHA-256")
            for name in ("epochs", "offset_index", "time_index"):
                body[name] = tuple(tuple(pair) for pair in body[name])
            manifest = cls(**body)
        except CorruptObjectError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptObjectError(key, f"unreadable manifest ({exc})") from None
        if manifest.manifest_key != key:
            raise CorruptObjectError(key, f"manifest describes {manifest.data_key}, "
                                     "not the object its name says")
        return manifest

    def sha256(self) -> str:
        """SHA-256 (hex) of the canonical encoding: what the log records and the next
        log object's manifest chains to."""
        return hashlib.sha256(self.encode()).hexdigest()


@attrs.frozen
class BatchSpan:
    """What a walk over back-to-back batches found (`describe_batches`)."""

    end_offset: int
    first_time_ms: int
    last_time_ms: int
    last_epoch: int
    epochs: tuple[tuple[int, int], ...]
    offset_index: tuple[tuple[int, int], ...]
    time_index: tuple[tuple[int, int], ...]


def describe_batches(data: bytes, start_offset: int,
                     index_interval_bytes: int = INDEX_INTERVAL_BYTES, *,
                     check_crcs: bool = True) -> BatchSpan:
    """Walk back-to-back batches starting at `start_offset`, checking each CRC (unless
    the caller just did: `check_crcs=False`) and the offsets' continuity.
    CorruptBatchError at the first bad batch."""
    check = verify_batch if check_crcs else peek_batch_header
    pos, expected = 0, start_offset
    epochs: list[tuple[int, int]] = []
    offset_index: list[tuple[int, int]] = []
    time_index: list[tuple[int, int]] = []
    since_index = index_interval_bytes  # the first batch always gets an entry
    first_time = last_time = max_time = -1
    while pos < len(data):
        header = check(data, pos)
        if pos + header.size_bytes > len(data):
            raise CorruptBatchError("the data ends inside a batch", expected, pos)
        if header.base_offset != expected:
            raise CorruptBatchError(f"offset discontinuity: batch starts at "
                                    f"{header.base_offset}, expected {expected}", expected, pos)
        if not epochs or header.epoch > epochs[-1][0]:
            epochs.append((header.epoch, header.base_offset))
        elif header.epoch < epochs[-1][0]:
            raise CorruptBatchError(f"epoch goes back to {header.epoch}", expected, pos)
        if since_index >= index_interval_bytes:
            offset_index.append((header.base_offset, pos))
            since_index = 0
        if header.append_time_ms > max_time:
            # The first batch whose append time passes every earlier one.
            time_index.append((header.append_time_ms, header.base_offset))
            max_time = header.append_time_ms
        if first_time < 0:
            first_time = header.append_time_ms
        last_time = header.append_time_ms
        since_index += header.size_bytes
        pos += header.size_bytes
        expected = header.next_offset
    return BatchSpan(expected, first_time, last_time, epochs[-1][0] if epochs else -1,
                     tuple(epochs), tuple(offset_index), tuple(time_index))


def segment_manifest(cluster_id: str, segment_id: str, start_offset: int, data: bytes, *,
                     copier_id: int = -1, copier_epoch: int = -1,
                     check_crcs: bool = True, prev_manifest_sha256: str | None = None
                     ) -> Manifest:
    """The manifest of a log object holding `data` (batches from `start_offset`;
    `check_crcs=False` when they were verified as they were read). With
    `prev_manifest_sha256` ("" for the first object of a chain), a format 2
    manifest on the hash chain; None: format 1 (below metadata.version 9)."""
    span = describe_batches(data, start_offset, check_crcs=check_crcs)
    hashed = prev_manifest_sha256 is not None
    return Manifest(cluster_id, segment_id, "segment", start_offset, span.end_offset,
                    len(data), crc32c.crc32c(data), span.first_time_ms, span.last_time_ms,
                    span.last_epoch, span.epochs, span.offset_index, span.time_index,
                    copier_id, copier_epoch,
                    hashlib.sha256(data).hexdigest() if hashed else "",
                    prev_manifest_sha256 or "")


def snapshot_manifest(cluster_id: str, segment_id: str, end_offset: int, epoch: int,
                      data: bytes, time_ms: int, *, copier_id: int = -1,
                      copier_epoch: int = -1, hashed: bool = False) -> Manifest:
    return Manifest(cluster_id, segment_id, "snapshot", 0, end_offset, len(data),
                    crc32c.crc32c(data), time_ms, time_ms, epoch, copier_id=copier_id,
                    copier_epoch=copier_epoch,
                    data_sha256=hashlib.sha256(data).hexdigest() if hashed else "")


def check_data(manifest: Manifest, data: bytes) -> None:
    """The data object must be exactly what the manifest describes; else
    CorruptObjectError naming the object and the first offset found damaged."""
    key = manifest.data_key
    if len(data) != manifest.size_bytes:
        raise CorruptObjectError(key, f"object holds {len(data)} bytes, the manifest says "
                                 f"{manifest.size_bytes} (short or overwritten object)",
                                 manifest.start_offset if manifest.kind == "segment" else None)
    if crc32c.crc32c(data) == manifest.data_crc32c:
        if manifest.hashed and hashlib.sha256(data).hexdigest() != manifest.data_sha256:
            # Valid CRCs, other bytes: written on purpose, not damaged.
            raise CorruptObjectError(key, "data SHA-256 does not match the manifest (the "
                                     "object was replaced)",
                                     manifest.start_offset if manifest.kind == "segment"
                                     else None)
        return
    if manifest.kind == "segment":
        try:
            describe_batches(data, manifest.start_offset)
        except CorruptBatchError as exc:
            raise CorruptObjectError(key, exc.reason, exc.offset) from None
    raise CorruptObjectError(key, "data CRC-32C does not match the manifest",
                             manifest.start_offset if manifest.kind == "segment" else None)
