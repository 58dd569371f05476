"""The remote-storage seam (KIP-405's RemoteStorageManager, reduced to what a tier of
immutable objects needs) and its two implementations.

A tier is named by one URL, which is all an executor, a CLI or a controller needs
to open it (credentials come from the environment or the controller's config):

    file:///var/lib/metakraft/tier                     a directory (local or a mount)
    s3://bucket/prefix?endpoint=http://host:9000&region=us-east-1

The S3 tier goes through boto3: the reference AWS SDK, kept by AWS, speaks every
S3-compatible store through `endpoint_url`, and reads credentials the standard way
(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_PROFILE / instance roles).

Every failure to reach or use the tier is a `TierUnavailableError` (retried by the
copier); a missing object is `ObjectNotFoundError`.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from controller.storage.fsutil import fsync_dir

# Objects are read whole by the readers; a bound keeps a bad listing from asking
# for gigabytes at once.
MAX_OBJECT_BYTES = 1024 * 1024 * 1024


class TierError(Exception):
    """A tier problem, with a message that names the tier, the object and the cause."""


class TierUnavailableError(TierError):
    """The tier cannot be reached or refused an operation (retry later)."""


class ObjectNotFoundError(TierError):
    """The named object does not exist."""


@attrs.frozen
class ObjectInfo:
    key: str
    size_bytes: int


class RemoteStorage(Protocol):
    """Immutable objects under string keys ('/'-separated, relative to the tier root)."""

    @property
    def url(self) -> str: ...

    def put(self, key: str, data: bytes) -> None:
        """Store `data` under `key`, whole or not at all (readers never see a part)."""
        ...

    def get(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        """`length` bytes from `start` (None: to the end)."""
        ...

    def delete(self, key: str) -> None:
        """Remove `key`; deleting a missing key is not an error."""
        ...

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with `prefix`, sorted by key."""
        ...


@attrs.frozen
class TierLocation:
    """A parsed tier URL."""

    url: str
    scheme: str  # "file" or "s3"
    path: str  # directory (file) or bucket (s3)
    prefix: str = ""  # s3: key prefix without leading or trailing '/'
    endpoint: str | None = None
    region: str | None = None


def parse_tier_url(url: str) -> TierLocation:
    """Check a tier URL; ValueError naming what is wrong."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ValueError(f"tier URL {url!r}: a directory tier is file:///absolute/path")
        if parts.query:
            raise ValueError(f"tier URL {url!r}: a directory tier takes no ?options")
        return TierLocation(url, "file", unquote(parts.path))
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"tier URL {url!r}: an S3 tier is s3://bucket/prefix")
        options = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(options) - {"endpoint", "region"})
        if unknown:
            raise ValueError(f"tier URL {url!r}: unknown option(s) {', '.join(unknown)}; "
                             "the options are endpoint and region")
        endpoint = options.get("endpoint", [None])[-1]
        if endpoint is not None and urlsplit(endpoint).scheme not in ("http", "https"):
            raise ValueError(f"tier URL {url!r}: endpoint must be an http(s) URL")
        return TierLocation(url, "s3", parts.netloc, unquote(parts.path).strip("/"), endpoint,
                            options.get("region", [None])[-1])
    raise ValueError(f"tier URL {url!r}: expected file:///path or s3://bucket/prefix")


# boto3 is an extra: a cluster without an S3 tier does not install it.
S3_EXTRA = "metakraft[s3]"


def require_s3_client() -> None:
    """Raise ValueError saying what to install if the S3 client is missing."""
    try:
        import boto3  # noqa: F401
        import botocore  # noqa: F401
    except ImportError as exc:
        raise ValueError(f"an s3:// tier needs boto3, which the core install leaves out: "
                         f"pip install '{S3_EXTRA}' ({exc})") from None


def open_store(url: str, *, access_key_id: str | None = None,
               secret_access_key: str | None = None) -> RemoteStorage:
    location = parse_tier_url(url)
    if location.scheme == "file":
        return DirectoryStore(Path(location.path), url)
    return S3Store(location, access_key_id=access_key_id, secret_access_key=secret_access_key)


class DirectoryStore:
    """Objects as files under a directory. A put writes a temp file, fsyncs it,
    renames it into place and fsyncs the directory: whole or absent after a crash."""

    def __init__(self, root: Path, url: str | None = None) -> None:
        self.root = root
        self._url = url or root.resolve().as_uri()

    @property
    def url(self) -> str:
        return self._url

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise TierError(f"bad object key {key!r}")
        return self.root / key

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            fsync_dir(path.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise TierUnavailableError(f"{self.url}: cannot write {key}: "
                                       f"{exc.strerror or exc}") from exc

    def get(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read(-1 if length is None else length)
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{self.url}: no object {key}") from None
        except OSError as exc:
            raise TierUnavailableError(f"{self.url}: cannot read {key}: "
                                       f"{exc.strerror or exc}") from exc

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink(missing_ok=True)
            fsync_dir(path.parent)
        except FileNotFoundError:
            pass  # the folder itself is gone: so is the object
        except OSError as exc:
            raise TierUnavailableError(f"{self.url}: cannot delete {key}: "
                                       f"{exc.strerror or exc}") from exc

    def list(self, prefix: str) -> list[ObjectInfo]:
        out: list[ObjectInfo] = []
        if not self.root.is_dir():
            if self.root.exists():
                raise TierUnavailableError(f"{self.url}: not a directory")
            return out
        try:
            for dirpath, _dirs, files in os.walk(self.root):
                for name in files:
                    if name.startswith(".") and name.endswith(".tmp"):
                        continue  # a put in progress (or one that died)
                    full = Path(dirpath) / name
                    key = full.relative_to(self.root).as_posix()
                    if key.startswith(prefix):
                        out.append(ObjectInfo(key, full.stat().st_size))
        except OSError as exc:
            raise TierUnavailableError(f"{self.url}: cannot list: {exc.strerror or exc}") from exc
        return sorted(out, key=lambda o: o.key)


class S3Store:
    """Objects in an S3 (or S3-compatible) bucket under a key prefix. A PUT is atomic
    in S3: a reader sees the whole object or none."""

    def __init__(self, location: TierLocation, *, access_key_id: str | None = None,
                 secret_access_key: str | None = None, timeout_s: float = 5.0) -> None:
        require_s3_client()
        import boto3  # the S3 tier only; a directory tier must not need it
        from botocore.config import Config

        self.location = location
        self.bucket = location.path
        self._prefix = f"{location.prefix}/" if location.prefix else ""
        session = boto3.session.Session()
        self._client: Any = session.client(
            "s3", endpoint_url=location.endpoint,
            region_name=location.region or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            aws_access_key_id=access_key_id, aws_secret_access_key=secret_access_key,
            config=Config(connect_timeout=timeout_s, read_timeout=timeout_s,
                          retries={"max_attempts": 2, "mode": "standard"},
                          s3={"addressing_style": "path"}))

    @property
    def url(self) -> str:
        return self.location.url

    def _fail(self, action: str, key: str, exc: Exception) -> TierError:
        from botocore.exceptions import ClientError

        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                return ObjectNotFoundError(f"{self.url}: no object {key}")
            return TierUnavailableError(f"{self.url}: cannot {action} {key}: {code} "
                                        f"{exc.response.get('Error', {}).get('Message', '')}")
        return TierUnavailableError(f"{self.url}: cannot {action} {key}: {exc}")

    def put(self, key: str, data: bytes) -> None:
        try:
            self._client.put_object(Bucket=self.bucket, Key=self._prefix + key, Body=data)
        except Exception as exc:
            raise self._fail("write", key, exc) from exc

    def get(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        extra: dict[str, str] = {}
        if start or length is not None:
            if length == 0:
                return b""
            last = "" if length is None else str(start + length - 1)
            extra["Range"] = f"bytes={start}-{last}"
        try:
            reply = self._client.get_object(Bucket=self.bucket, Key=self._prefix + key, **extra)
            data: bytes = reply["Body"].read()
            return data
        except Exception as exc:
            from botocore.exceptions import ClientError

            if (isinstance(exc, ClientError)
                    and exc.response.get("Error", {}).get("Code") == "InvalidRange"):
                return b""
            raise self._fail("read", key, exc) from exc

    def delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self._prefix + key)
        except Exception as exc:
            error = self._fail("delete", key, exc)
            if not isinstance(error, ObjectNotFoundError):
                raise error from exc

    def list(self, prefix: str) -> list[ObjectInfo]:
        out: list[ObjectInfo] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._prefix + prefix)
            for page in pages:
                for item in page.get("Contents", ()):
                    out.append(ObjectInfo(item["Key"][len(self._prefix):], int(item["Size"])))
        except Exception as exc:
            raise self._fail("list", prefix or "/", exc) from exc
        return sorted(out, key=lambda o: o.key)
