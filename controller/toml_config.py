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


def _ascii_digits(text: str) -> bool:
    """0-9 only: `str.isdigit` also takes other scripts' digits ("٣"), which `int`
    would then accept."""
    return text.isascii() and text.isdigit()


def require_int(table: Mapping[str, Any], key: str, where: str, *, minimum: int = 1,
                maximum: int | None = None) -> int:
    value = table[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}{key}: expected an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{where}{key}: must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{where}{key}: must be <= {maximum}, got {value}")
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
    if not sep or not host or not _ascii_digits(port) or int(port) > 65535:
        raise ConfigError(f"{where}: expected HOST:PORT, got {text!r}")
    return text


def id_address_table(doc: Mapping[str, Any], key: str, what: str) -> dict[int, str]:
    """The required table `[key]` of `id = "host:port"` entries (at least one), e.g.
    the controller voters; `what` names an entry in messages ("controller")."""
    if key not in doc:
        raise ConfigError(f'missing [{key}] table: id = "host:port" for every {what}')
    out: dict[int, str] = {}
    for name, address in sub_table(doc, key).items():
        if not _ascii_digits(name):
            raise ConfigError(f"{key}.{name}: a {what} id must be a non-negative integer")
        if not isinstance(address, str):
            raise ConfigError(f'{key}.{name}: expected "host:port", got {address!r}')
        out[int(name)] = host_port(address, f"{key}.{name}")
    if not out:
        raise ConfigError(f'[{key}] is empty: list every {what} as id = "host:port"')
    return out



LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("kv", "json")


def logging_table(doc: Mapping[str, Any]) -> tuple[str, str]:
    """`[logging]`: (level, format), defaults INFO and kv (logfmt)."""
    table = sub_table(doc, "logging")
    reject_unknown(table, ("level", "format"), "logging.")
    level = require_str(table, "level", "logging.").upper() if "level" in table else "INFO"
    if level not in LOG_LEVELS:
        raise ConfigError(f"logging.level: expected one of {', '.join(LOG_LEVELS)}, "
                          f"got {level!r}")
    fmt = require_str(table, "format", "logging.") if "format" in table else "kv"
    if fmt not in LOG_FORMATS:
        raise ConfigError(f'logging.format: expected "kv" or "json", got {fmt!r}')
    return level, fmt


def metrics_table(doc: Mapping[str, Any]) -> tuple[str, int | None]:
    """`[metrics]`: (address, port); port None (the default) serves no metrics, 0 picks
    a free port."""
    table = sub_table(doc, "metrics")
    reject_unknown(table, ("address", "port"), "metrics.")
    port = require_int(table, "port", "metrics.", minimum=0) if "port" in table else None
    if port is not None and port > 65535:
        raise ConfigError(f"metrics.port: must be <= 65535, got {port}")
    address = require_str(table, "address", "metrics.") if "address" in table else "127.0.0.1"
    return address, port
