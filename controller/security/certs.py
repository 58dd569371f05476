"""A private certificate authority and its certificates, for `metakraft dev` and tests.

Production deployments bring their own CA; this one exists so that a laptop
cluster runs with mutual TLS by default. Keys are EC P-256 (small and fast to
make); every certificate is valid for loopback (`localhost`, 127.0.0.1, ::1), so a
client can verify the server's name without any override.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from controller.storage.fsutil import atomic_write_bytes

DEFAULT_VALID_DAYS = 825  # the longest validity browsers accept; plenty for a dev cluster
_LOOPBACK_NAMES: tuple[x509.GeneralName, ...] = (
    x509.DNSName("localhost"),
    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    x509.IPAddress(ipaddress.ip_address("::1")),
)


@attrs.frozen
class CertFiles:
    """Where one identity's PEM files are: the CA bundle to trust, its certificate, its key."""

    ca_file: Path
    cert_file: Path
    key_file: Path


@attrs.frozen
class CertificateAuthority:
    name: str
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @classmethod
    def create(cls, name: str, *, valid_days: int = DEFAULT_VALID_DAYS) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        cert = (x509.CertificateBuilder()
                .subject_name(subject).issuer_name(subject)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=valid_days))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True,
                    content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False),
                    critical=True)
                .sign(key, hashes.SHA256()))
        return cls(name, key, cert)

    @classmethod
    def load(cls, cert_file: Path, key_file: Path) -> CertificateAuthority:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey), key_file
        name = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        return cls(str(name), key, cert)

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def save(self, directory: Path) -> CertFiles:
        """Write the CA's certificate and key (0600) under `directory`."""
        files = CertFiles(directory / "ca.crt", directory / "ca.crt", directory / "ca.key")
        _write(files.cert_file, self.certificate_pem(), private=False)
        _write(files.key_file, _key_pem(self.key), private=True)
        return files

    def issue(self, common_name: str, *, valid_days: int = DEFAULT_VALID_DAYS,
              not_before: datetime.datetime | None = None
              ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        """A key and a certificate for `common_name`, usable as TLS server and client."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or _now() - datetime.timedelta(minutes=5)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([
                    x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "metakraft")]))
                .issuer_name(self.certificate.subject)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(start)
                .not_valid_after(start + datetime.timedelta(days=valid_days))
                .add_extension(x509.SubjectAlternativeName(list(_LOOPBACK_NAMES)),
                               critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False)
                .sign(self.key, hashes.SHA256()))
        return key, cert

    def issue_files(self, common_name: str, directory: Path, *,
                    valid_days: int = DEFAULT_VALID_DAYS,
                    not_before: datetime.datetime | None = None) -> CertFiles:
        """`issue`, written as `<name>.crt` / `<name>.key` beside a copy of the CA bundle."""
        key, cert = self.issue(common_name, valid_days=valid_days, not_before=not_before)
        files = CertFiles(directory / "ca.crt", directory / f"{common_name}.crt",
                          directory / f"{common_name}.key")
        _write(files.ca_file, self.certificate_pem(), private=False)
        _write(files.cert_file, cert.public_bytes(serialization.Encoding.PEM), private=False)
        _write(files.key_file, _key_pem(key), private=True)
        return files


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, *, private: bool) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write_bytes(path, data)
    if private:
        os.chmod(path, 0o600)
