"""Which node a principal may speak for: node ids bound to certificates.

A Raft message names its sender (`src`), a broker heartbeat its broker id; TLS
proves only who is calling. Without a binding, any controller's certificate could
claim to be any voter (and be counted toward the high watermark for a disk it
does not have), and any broker's could keep another broker alive. So each
principal maps to at most one node id, by a pattern over the principal whose
one group is the id::

    [tls]
    controller_id_pattern = "User:controller-(\\d+)"   # the default
    broker_id_pattern = "User:broker-(\\d+)"           # the default

A controller principal (`controller_principals`) may send Raft messages only as
the node its principal names; a principal that names a broker may follow the log
and send broker RPCs only as that broker. A caller whose principal names no
broker may send broker RPCs only if it is a super user (operators' tools).
An empty pattern turns its binding off (any allowed principal may then speak
for any id: the model Kafka has). `metakraft dev` issues certificates named
`controller-<id>` and `broker-<id>`, which the defaults bind.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from controller.toml_config import ConfigError

DEFAULT_CONTROLLER_ID_PATTERN = r"User:controller-(\d+)"
DEFAULT_BROKER_ID_PATTERN = r"User:broker-(\d+)"
IDENTITY_KEYS = ("controller_id_pattern", "broker_id_pattern")


def _compile(pattern: str, key: str) -> re.Pattern[str] | None:
    if not pattern:
        return None
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"tls.{key}: not a regular expression: {exc}") from None
    if compiled.groups != 1:
        raise ConfigError(f"tls.{key}: needs exactly one group, the node id "
                          f"(e.g. {DEFAULT_BROKER_ID_PATTERN!r}), has {compiled.groups}")
    return compiled


def _id_of(pattern: re.Pattern[str] | None, principal: str) -> int | None:
    if pattern is None:
        return None
    match = pattern.fullmatch(principal)
    if match is None or not match.group(1).isdigit() or len(match.group(1)) > 10:
        return None
    return int(match.group(1))


@attrs.frozen
class NodeIdentities:
    """The two bindings; a None pattern is a binding turned off."""

    controller_pattern: re.Pattern[str] | None = re.compile(DEFAULT_CONTROLLER_ID_PATTERN)
    broker_pattern: re.Pattern[str] | None = re.compile(DEFAULT_BROKER_ID_PATTERN)

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> NodeIdentities:
        """From a `[tls]` table's `controller_id_pattern` / `broker_id_pattern`."""
        values = {}
        for key, default in (("controller_id_pattern", DEFAULT_CONTROLLER_ID_PATTERN),
                             ("broker_id_pattern", DEFAULT_BROKER_ID_PATTERN)):
            value = table.get(key, default)
            if not isinstance(value, str):
                raise ConfigError(f"tls.{key}: expected a string, got {value!r}")
            values[key] = _compile(value, key)
        return cls(values["controller_id_pattern"], values["broker_id_pattern"])

    def controller_refusal(self, principal: str, claimed_id: int) -> str | None:
        """Why controller `principal` may not send Raft messages as node `claimed_id`
        (None: it may)."""
        if self.controller_pattern is None:
            return None
        own = _id_of(self.controller_pattern, principal)
        if own == claimed_id:
            return None
        if own is None:
            return (f"{principal} names no controller under tls.controller_id_pattern "
                    f"{self.controller_pattern.pattern!r}, so it may speak for none")
        return f"{principal} is controller {own}, not node {claimed_id}"

    def broker_refusal(self, principal: str, claimed_id: int, *,
                       is_super_user: bool) -> str | None:
        """Why `principal` may not act as broker `claimed_id` (None: it may)."""
        if self.broker_pattern is None:
            return None
        own = _id_of(self.broker_pattern, principal)
        if own == claimed_id or (own is None and is_super_user):
            return None
        if own is None:
            return (f"{principal} names no broker under tls.broker_id_pattern "
                    f"{self.broker_pattern.pattern!r} and is not a super user, so it may "
                    "act for no broker")
        return f"{principal} is broker {own}, not broker {claimed_id}"

    def names_broker(self, principal: str) -> int | None:
        """The broker id `principal` names, if any."""
        return _id_of(self.broker_pattern, principal)


# No TLS, no identities: nothing to bind.
UNBOUND = NodeIdentities(None, None)
