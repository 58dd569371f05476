"""TLS material is checked at start: each file must be PEM of the right kind, the key
must be the certificate's, and the certificate valid now; each mistake is named."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from controller.security.certs import CertificateAuthority
from controller.security.tls import TlsCredentials
from controller.toml_config import ConfigError


def test_good_files_load(tmp_path: Path) -> None:
    files = CertificateAuthority.create("ca").issue_files("alice", tmp_path)
    creds = TlsCredentials.load(files.ca_file, files.cert_file, files.key_file)
    assert "CN=alice" in creds.subject
    assert (tmp_path / "alice.key").stat().st_mode & 0o077 == 0  # the key is private


def test_each_bad_file_is_named(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("ca")
    alice = ca.issue_files("alice", tmp_path)
    bob = ca.issue_files("bob", tmp_path)
    with pytest.raises(ConfigError, match="cannot read"):
        TlsCredentials.load(tmp_path / "missing.crt", alice.cert_file, alice.key_file)
    with pytest.raises(ConfigError, match=r"ca_file .* holds no PEM certificate"):
        TlsCredentials.load(alice.key_file, alice.cert_file, alice.key_file)
    with pytest.raises(ConfigError, match=r"cert_file .* is not a PEM certificate"):
        TlsCredentials.load(alice.ca_file, alice.key_file, alice.key_file)
    with pytest.raises(ConfigError, match=r"key_file .* is not an unencrypted PEM private key"):
        TlsCredentials.load(alice.ca_file, alice.cert_file, alice.cert_file)
    with pytest.raises(ConfigError, match="is not the key of the certificate"):
        TlsCredentials.load(alice.ca_file, alice.cert_file, bob.key_file)
    big = tmp_path / "big.crt"
    big.write_bytes(b"x" * (1024 * 1024 + 1))
    with pytest.raises(ConfigError, match="larger than"):
        TlsCredentials.load(big, alice.cert_file, alice.key_file)


def test_an_expired_certificate_is_refused_at_start(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("ca")
    old = ca.issue_files("old", tmp_path, valid_days=1, not_before=datetime.datetime.now(
        datetime.UTC) - datetime.timedelta(days=3))
    with pytest.raises(ConfigError, match=r"is not valid now .* renew it"):
        TlsCredentials.load(old.ca_file, old.cert_file, old.key_file)
