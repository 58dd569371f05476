"""TLS settings: the `[tls]` table every daemon and the CLI read, and the PEM material
gRPC needs.

Mutual TLS is the one mode: a server requires a client certificate signed by its CA
bundle, and a client verifies the server's certificate against the same bundle (and
its name: certificates must carry the host name or IP the peers dial as a subject
alternative name). Plaintext is possible only by saying so (`enabled = false`).

    [tls]
    enabled = true                      # false: plaintext, no authentication
    ca_file = "/etc/metakraft/ca.crt"   # PEM bundle of the CA(s) to trust
    cert_file = "/etc/metakraft/controller-1.crt"
    key_file = "/etc/metakraft/controller-1.key"
    principal_mapping_rules = ["DEFAULT"]   # see controller.security.principal
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from controller.security.certs import CertFiles
from controller.security.principal import (
    DEFAULT_RULES,
    PrincipalMapper,
    PrincipalMappingError,
)
from controller.toml_config import ConfigError, reject_unknown, require_str, sub_table

TLS_KEYS = ("enabled", "ca_file", "cert_file", "key_file", "principal_mapping_rules")
MAX_PEM_BYTES = 1024 * 1024  # a CA bundle, certificate or key file is at most this big


@attrs.frozen
class TlsCredentials:
    """PEM bytes, read and checked once at start (a daemon never re-reads them)."""

    ca_pem: bytes = attrs.field(repr=False)
    cert_pem: bytes = attrs.field(repr=False)
    key_pem: bytes = attrs.field(repr=False)
    # The subject of our own certificate, for logs.
    subject: str = ""

    @classmethod
    def load(cls, ca_file: Path, cert_file: Path, key_file: Path) -> TlsCredentials:
        """Read and check the three files: each must be PEM of the right kind, the key
        must match the certificate, and the certificate must be valid now."""
        ca_pem, cert_pem, key_pem = (_read(p, what) for p, what in (
            (ca_file, "tls.ca_file"), (cert_file, "tls.cert_file"), (key_file, "tls.key_file")))
        try:
            x509.load_pem_x509_certificates(ca_pem)
        except ValueError:
            raise ConfigError(f"tls.ca_file {ca_file} holds no PEM certificate") from None
        try:
            cert = x509.load_pem_x509_certificate(cert_pem)
        except ValueError:
            raise ConfigError(f"tls.cert_file {cert_file} is not a PEM certificate") from None
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"tls.key_file {key_file} is not an unencrypted PEM private key "
                              f"({exc})") from None
        if key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo) != \
                cert.public_key().public_bytes(serialization.Encoding.DER,
                                               serialization.PublicFormat.SubjectPublicKeyInfo):
            raise ConfigError(f"tls.key_file {key_file} is not the key of the certificate "
                              f"{cert_file}")
        now = datetime.datetime.now(datetime.UTC)
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            raise ConfigError(
                f"tls.cert_file {cert_file} is not valid now (valid "
                f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} to "
                f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC); renew it")
        return cls(ca_pem, cert_pem, key_pem, cert.subject.rfc4514_string())


@attrs.frozen
class TlsConfig:
    """A parsed `[tls]` table. `files` is None for an explicit plaintext setup;
    `credentials` are the files' contents once `load`ed (parsing reads no file)."""

    files: CertFiles | None
    mapper: PrincipalMapper = attrs.field(factory=PrincipalMapper.parse)
    credentials: TlsCredentials | None = None

    @property
    def enabled(self) -> bool:
        return self.files is not None

    def load(self) -> TlsConfig:
        """This config with the credentials read and checked (ConfigError if bad)."""
        if self.files is None:
            return self
        files = self.files
        return attrs.evolve(self, credentials=TlsCredentials.load(
            files.ca_file, files.cert_file, files.key_file))


PLAINTEXT = TlsConfig(None)


def parse_tls_table(doc: Mapping[str, Any], base_dir: Path, *, required: bool,
                    extra_keys: tuple[str, ...] = ()) -> TlsConfig:
    """The `[tls]` table of a config document. `required`: a daemon's config must have
    one (plaintext only as `enabled = false`); the CLI's may leave it out. `extra_keys`:
    keys the caller reads itself."""
    if "tls" not in doc:
        if required:
            raise ConfigError(
                "missing [tls]: give ca_file, cert_file and key_file for mutual TLS, or "
                "set `enabled = false` in [tls] to run plaintext (no authentication: "
                "anyone who can reach the port is trusted)")
        return PLAINTEXT
    table = sub_table(doc, "tls")
    reject_unknown(table, TLS_KEYS + extra_keys, "tls.")
    enabled = table.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"tls.enabled: expected true or false, got {enabled!r}")
    rules = table.get("principal_mapping_rules", list(DEFAULT_RULES))
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise ConfigError("tls.principal_mapping_rules: expected a list of strings")
    try:
        mapper = PrincipalMapper.parse(rules)
    except PrincipalMappingError as exc:
        raise ConfigError(f"tls.principal_mapping_rules: {exc}") from None
    if not enabled:
        extra = sorted(set(table) & {"ca_file", "cert_file", "key_file"})
        if extra:
            raise ConfigError(f"tls.enabled is false but {', '.join(extra)} given: remove "
                              "them or enable TLS")
        return TlsConfig(None, mapper)
    paths = []
    for key in ("ca_file", "cert_file", "key_file"):
        if key not in table:
            raise ConfigError(f"tls.{key} is required when TLS is enabled")
        path = Path(require_str(table, key, "tls."))
        paths.append(path if path.is_absolute() else (base_dir / path).resolve())
    return TlsConfig(CertFiles(*paths), mapper)


def _read(path: Path, what: str) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_PEM_BYTES:
        raise ConfigError(f"{what}: {path} is larger than {MAX_PEM_BYTES} bytes")
    return data
