"""The `[authorizer]` table and principal lists, as every daemon's config reads them
(controllers, and brokers for their data service)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.security.acl import InvalidAclError, check_principal
from controller.security.authorizer import AuthorizerConfig
from controller.security.identity import IDENTITY_KEYS, UNBOUND, NodeIdentities
from controller.security.tls import TlsConfig
from controller.toml_config import ConfigError, reject_unknown, sub_table

AUTHORIZER_KEYS = ("enabled", "super_users", "allow_everyone_if_no_acl_found")


def principal_list(table: Mapping[str, Any], key: str, where: str) -> frozenset[str]:
    values = table.get(key, [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{where}{key}: expected a list of \"User:<name>\" strings")
    for value in values:
        try:
            check_principal(value)
        except InvalidAclError as exc:
            raise ConfigError(f"{where}{key}: {exc}") from None
    return frozenset(values)


def authorizer_table(doc: Mapping[str, Any], tls: TlsConfig) -> AuthorizerConfig | None:
    """`[authorizer]`: None when off (by default it is on exactly when TLS is)."""
    table = sub_table(doc, "authorizer")
    reject_unknown(table, AUTHORIZER_KEYS, "authorizer.")
    enabled = table.get("enabled", tls.enabled)
    allow_everyone = table.get("allow_everyone_if_no_acl_found", False)
    for key, value in (("enabled", enabled), ("allow_everyone_if_no_acl_found", allow_everyone)):
        if not isinstance(value, bool):
            raise ConfigError(f"authorizer.{key}: expected true or false, got {value!r}")
    super_users = principal_list(table, "super_users", "authorizer.")
    if not enabled:
        return None
    return AuthorizerConfig(super_users=super_users,
                            allow_everyone_if_no_acl_found=allow_everyone)


def identities_table(doc: Mapping[str, Any], tls: TlsConfig) -> NodeIdentities:
    """The node-id bindings of `[tls]` (`controller_id_pattern`, `broker_id_pattern`);
    UNBOUND on plaintext, where giving one is an error (a plaintext peer has no
    identity)."""
    table = sub_table(doc, "tls")
    if not tls.enabled:
        given = sorted(set(table) & set(IDENTITY_KEYS))
        if given:
            raise ConfigError(f"tls.{given[0]} needs TLS (a plaintext peer has no identity)")
        return UNBOUND
    return NodeIdentities.from_table(table)
