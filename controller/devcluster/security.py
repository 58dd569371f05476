"""The dev cluster's certificates and the admin's command config.

On every start (`metakraft dev` without `--insecure`): a private CA under
`DATA_DIR/tls/` (made once, reused on resume), a certificate per process named
after it (`controller-3000`, `broker-1`: principal `User:controller-3000`, ...)
and one for the operator (`admin`, a super user), and `DATA_DIR/admin.toml`, the
command config the CLI takes with `--command-config` or METAKRAFT_COMMAND_CONFIG.
"""

from __future__ import annotations

import json
from pathlib import Path

from controller.devcluster.layout import ClusterSpec, NodeSpec
from controller.security.certs import CertFiles, CertificateAuthority
from controller.security.principal import USER_PREFIX
from controller.security.tls import TlsCredentials
from controller.storage.fsutil import atomic_write_bytes

TLS_DIR_NAME = "tls"
ADMIN_NAME = "admin"
ADMIN_PRINCIPAL = USER_PREFIX + ADMIN_NAME
COMMAND_CONFIG_NAME = "admin.toml"


def tls_dir(spec: ClusterSpec) -> Path:
    return spec.root / TLS_DIR_NAME


def command_config_path(spec: ClusterSpec) -> Path:
    return spec.root / COMMAND_CONFIG_NAME


def principal_of(node: NodeSpec) -> str:
    return USER_PREFIX + node.name


def cert_files(spec: ClusterSpec, name: str) -> CertFiles:
    directory = tls_dir(spec)
    return CertFiles(directory / "ca.crt", directory / f"{name}.crt", directory / f"{name}.key")


def ensure_credentials(spec: ClusterSpec) -> None:
    """Make the CA (once), every missing certificate, and the admin's command config."""
    directory = tls_dir(spec)
    ca_files = CertFiles(directory / "ca.crt", directory / "ca.crt", directory / "ca.key")
    if ca_files.cert_file.exists() and ca_files.key_file.exists():
        ca = CertificateAuthority.load(ca_files.cert_file, ca_files.key_file)
    else:
        ca = CertificateAuthority.create(f"metakraft dev CA {spec.cluster_id}")
        ca.save(directory)
    for name in [ADMIN_NAME, *(node.name for node in spec.nodes)]:
        files = cert_files(spec, name)
        if not (files.cert_file.exists() and files.key_file.exists()):
            ca.issue_files(name, directory)
    admin = cert_files(spec, ADMIN_NAME)
    atomic_write_bytes(command_config_path(spec), (
        "# Written by `metakraft dev`: the admin's client certificate (a super user).\n"
        "# Use: --command-config THIS_FILE, or export METAKRAFT_COMMAND_CONFIG=THIS_FILE\n"
        f"[tls]\nca_file = {_quote(admin.ca_file)}\ncert_file = {_quote(admin.cert_file)}\n"
        f"key_file = {_quote(admin.key_file)}\n").encode())


def tls_table(spec: ClusterSpec, node: NodeSpec) -> str:
    """The node's `[tls]` table (plaintext stated explicitly when insecure)."""
    if not spec.secure:
        return "\n[tls]\nenabled = false\n"
    files = cert_files(spec, node.name)
    table = (f"\n[tls]\nca_file = {_quote(files.ca_file)}\ncert_file = {_quote(files.cert_file)}\n"
             f"key_file = {_quote(files.key_file)}\n")
    if node.role == "controller":
        principals = ", ".join(f'"{principal_of(n)}"' for n in spec.controllers)
        table += f"controller_principals = [{principals}]\n"
    # Controllers authorize admin requests, brokers produce and fetch: you may do both.
    table += f"\n[authorizer]\nsuper_users = [\"{ADMIN_PRINCIPAL}\"]\n"
    return table


def _quote(path: Path) -> str:
    # A JSON string is a valid TOML basic string (same escapes for what we write).
    return json.dumps(str(path))


def client_credentials(spec: ClusterSpec) -> TlsCredentials | None:
    """The admin's credentials for the supervisor's own probes (None when insecure)."""
    if not spec.secure:
        return None
    files = cert_files(spec, ADMIN_NAME)
    return TlsCredentials.load(files.ca_file, files.cert_file, files.key_file)
