"""Checks shared by the daemons' TOML config loaders (controller, broker agent).

Each helper names the key and what was expected, so a bad config fails at start
with a message a person can act on; unknown keys are refused so that a typo never
falls back to a default silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ConfigError(ValueError):
    """The config file is unusable; the message names the key and what to do."""


def require_int(table: Mapping[str, Any], key: str, where: str, *, minimum: int = 1) -> int:
    value = table[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}{key}: expected an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{where}{key}: must be >= {minimum}, got {value}")
    return value


def require_str(table: Mapping[str, Any], key: str, where: str = "") -> str:
    value = table[key]
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}{key}: expected a non-empty string, got {value!r}")
    return value


def sub_table(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{key}] must be a table")
    return value


def reject_unknown(table: Mapping[str, Any], known: set[str] | tuple[str, ...], where: str) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(f"{where}unknown key(s) {', '.join(unknown)}; known keys: "
                          f"{', '.join(sorted(known))}")


def host_port(text: str, where: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{where}: expected HOST:PORT, got {text!r}")
    return text


def id_address_table(doc: Mapping[str, Any], key: str, what: str) -> dict[int, str]:
    """The required table `[key]` of `id = "host:port"` entries (at least one), e.g.
    the controller voters; `what` names an entry in messages ("controller")."""
    if key not in doc:
        raise ConfigError(f'missing [{key}] table: id = "host:port" for every {what}')
    out: dict[int, str] = {}
    for name, address in sub_table(doc, key).items():
        if not name.isdigit():
            raise ConfigError(f"{key}.{name}: a {what} id must be a non-negative integer")
        if not isinstance(address, str):
            raise ConfigError(f'{key}.{name}: expected "host:port", got {address!r}')
        out[int(name)] = host_port(address, f"{key}.{name}")
    if not out:
        raise ConfigError(f'[{key}] is empty: list every {what} as id = "host:port"')
    return out

