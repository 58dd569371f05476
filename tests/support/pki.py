"""Certificates for tests: one CA per test cluster, a certificate per name on demand
(`User:<name>` by the default mapping rule), and the TOML tables that use them."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from controller.security.certs import CertFiles, CertificateAuthority
from controller.security.tls import TlsCredentials


class TestPki:
    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, ca_name: str = "test CA") -> None:
        self.directory = directory
        self.ca = CertificateAuthority.create(ca_name)
        self._files: dict[str, CertFiles] = {}

    def files(self, name: str) -> CertFiles:
        found = self._files.get(name)
        if found is None:
            found = self._files[name] = self.ca.issue_files(name, self.directory)
        return found

    def credentials(self, name: str) -> TlsCredentials:
        files = self.files(name)
        return TlsCredentials.load(files.ca_file, files.cert_file, files.key_file)

    def expired_credentials(self, name: str) -> TlsCredentials:
        """A certificate that expired yesterday (loaded without the validity check)."""
        key, cert = self.ca.issue(name, valid_days=1, not_before=datetime.datetime.now(
            datetime.UTC) - datetime.timedelta(days=2))
        from cryptography.hazmat.primitives import serialization

        return TlsCredentials(
            self.ca.certificate_pem(), cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))

    def tls_table(self, name: str, extra: str = "") -> str:
        files = self.files(name)
        return (f"\n[tls]\nca_file = {json.dumps(str(files.ca_file))}\n"
                f"cert_file = {json.dumps(str(files.cert_file))}\n"
                f"key_file = {json.dumps(str(files.key_file))}\n{extra}")

    def command_config(self, name: str) -> Path:
        """A CLI command config file for `name`."""
        path = self.directory / f"{name}.client.toml"
        path.write_text(self.tls_table(name))
        return path


PLAINTEXT_TABLE = "\n[tls]\nenabled = false\n"
