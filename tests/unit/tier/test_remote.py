"""The remote-storage seam: one contract, checked on the directory tier (real files)
and on the S3 tier against a real S3-compatible server on loopback; tier URLs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.tier.remote import (
    DirectoryStore,
    ObjectNotFoundError,
    RemoteStorage,
    TierUnavailableError,
    open_store,
    parse_tier_url,
)
from tests.support.ports import free_ports
from tests.support.s3_server import CREDENTIALS, S3Server, running_s3


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with running_s3(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


@pytest.fixture(params=["directory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteStorage:
    if request.param == "directory":
        return open_store((tmp_path / "tier").as_uri())
    server: S3Server = request.getfixturevalue("s3")
    bucket = f"b{len(os.listdir(tmp_path.parent))}-{os.getpid()}"
    server.create_bucket(bucket)
    return open_store(server.url(bucket, "some/prefix"))


def test_put_get_range_list_delete(store: RemoteStorage) -> None:
    assert store.list("") == []
    store.put("log/a.log", b"0123456789")
    store.put("log/b.log", b"xyz")
    store.put("snapshots/c.checkpoint", b"")
    assert store.get("log/a.log") == b"0123456789"
    assert store.get("log/a.log", 3, 4) == b"3456"
    assert store.get("log/a.log", 8) == b"89"
    assert [(o.key, o.size_bytes) for o in store.list("log/")] == [("log/a.log", 10),
                                                                   ("log/b.log", 3)]
    assert [o.key for o in store.list("")] == ["log/a.log", "log/b.log",
                                               "snapshots/c.checkpoint"]
    store.put("log/a.log", b"new")  # objects are replaced whole
    assert store.get("log/a.log") == b"new"
    store.delete("log/a.log")
    store.delete("log/a.log")  # deleting a missing object is not an error
    with pytest.raises(ObjectNotFoundError, match=r"log/a\.log"):
        store.get("log/a.log")
    assert [o.key for o in store.list("log/")] == ["log/b.log"]


def test_directory_put_leaves_no_partial_file(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "tier")
    store.put("log/x.log", b"a" * 100_000)
    assert sorted(p.name for p in (tmp_path / "tier" / "log").iterdir()) == ["x.log"]
    # A put that died half way leaves a hidden temp file, which listings skip.
    (tmp_path / "tier" / "log" / ".y.log.123.tmp").write_bytes(b"half")
    assert [o.key for o in store.list("")] == ["log/x.log"]


def test_directory_tier_failures_are_unavailable_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "tier"
    blocker.write_text("a file where the tier directory should be")
    store = DirectoryStore(blocker)
    with pytest.raises(TierUnavailableError, match=r"cannot write log/x\.log"):
        store.put("log/x.log", b"data")
    with pytest.raises(TierUnavailableError, match="not a directory"):
        store.list("")
    with pytest.raises(Exception, match="bad object key"):
        DirectoryStore(tmp_path).put("../escape", b"")


def test_unreachable_s3_endpoint_is_an_unavailable_error() -> None:
    port = free_ports(1)[0]  # nothing listens there
    os.environ.update(CREDENTIALS)
    store = open_store(f"s3://bucket/p?endpoint=http://127.0.0.1:{port}")
    with pytest.raises(TierUnavailableError, match=f"127.0.0.1:{port}"):
        store.put("log/x.log", b"data")
    with pytest.raises(TierUnavailableError):
        store.list("")


def test_missing_bucket_is_an_unavailable_error(s3: S3Server) -> None:
    store = open_store(s3.url("no-such-bucket"))
    with pytest.raises(TierUnavailableError, match="NoSuchBucket"):
        store.put("log/x.log", b"data")


@pytest.mark.parametrize(("url", "message"), [
    ("file://relative/path", "file:///absolute/path"),
    ("file:///tmp/t?x=1", "takes no"),
    ("s3:///prefix", "s3://bucket/prefix"),
    ("s3://b/p?endpont=http://x", "unknown option"),
    ("s3://b/p?endpoint=ftp://x", "http"),
    ("gs://b/p", "expected file:///path or s3://bucket/prefix"),
])
def test_bad_tier_urls_are_refused_with_the_reason(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_tier_url(url)


def test_tier_url_parts() -> None:
    loc = parse_tier_url("s3://bucket/a/b/?endpoint=http://127.0.0.1:9000&region=eu-west-1")
    assert (loc.scheme, loc.path, loc.prefix, loc.endpoint, loc.region) == (
        "s3", "bucket", "a/b", "http://127.0.0.1:9000", "eu-west-1")
    assert parse_tier_url("file:///var/tier").path == "/var/tier"
