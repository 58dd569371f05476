"""What every admin command shares: connection options, output (rich tables for
people, ``--output json`` for scripts), and exit codes.

Exit codes (docs/operations.md, "Admin API and CLI"):
  0  success;
  1  the controller answered, but some item failed (each failure is printed) or it
     refused the whole request (malformed, too large, internal error);
  2  usage error (bad options; click's own code);
  3  no controller could serve the request (unreachable, no leader in time, or busy);
     nothing was applied;
  4  a write was sent but no answer came: its outcome is unknown (check with a
     describe command; the request id is printed).
"""

from __future__ import annotations

import enum
import functools
import json
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import click
from rich.console import Console
from rich.table import Table

from controller.api.client import (
    DEFAULT_TIMEOUT_MS,
    AdminClient,
    ControllerOverloadedError,
    ControllerUnreachableError,
    OutcomeUnknownError,
    RequestFailedError,
    parse_bootstrap,
)
from controller.api.seam import ReadConsistency
from controller.metadata import ApiError
from controller.security.tls import TlsCredentials, parse_tls_table
from controller.toml_config import ConfigError, reject_unknown

EXIT_OK = 0
EXIT_ITEM_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_OUTCOME_UNKNOWN = 4

F = TypeVar("F", bound=Callable[..., Any])


@attrs.frozen
class AdminOptions:
    bootstrap: tuple[str, ...]
    output: str
    timeout_ms: int
    # The client certificate from --command-config; None: plaintext.
    tls: TlsCredentials | None
    consistency: ReadConsistency = ReadConsistency.LINEARIZABLE
    # Reads: answer at a committed end offset of at least this (--min-offset).
    min_offset: int = 0

    @property
    def json(self) -> bool:
        return self.output == "json"


command_config_option = click.option(
    "--command-config",
    envvar="METAKRAFT_COMMAND_CONFIG",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="TOML file with a [tls] table (ca_file, cert_file, key_file): the client "
    "certificate that says who you are (env METAKRAFT_COMMAND_CONFIG). Without it the "
    "client speaks plaintext, which a TLS controller refuses.",
)


def load_command_config(path: Path | None) -> TlsCredentials | None:
    """The client's TLS credentials from a command config file (None: plaintext)."""
    if path is None:
        return None
    try:
        doc = tomllib.loads(path.read_text("utf-8"))
        reject_unknown(doc, ("tls",), f"{path}: ")
        return parse_tls_table(doc, path.parent, required=True).load().credentials
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror or exc}",
                                 param_hint="--command-config") from None
    except (tomllib.TOMLDecodeError, ConfigError) as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--command-config") from None


def admin_options(command: F) -> F:
    """Add the connection and output options; the command gets them as ``opts``."""

    @click.option(
        "--bootstrap",
        "--bootstrap-server",
        "bootstrap",
        envvar="METAKRAFT_BOOTSTRAP",
        required=True,
        help="Controller addresses HOST:PORT[,HOST:PORT...] (env METAKRAFT_BOOTSTRAP; "
        "--bootstrap-server is Kafka's name for it); any controller will do, the active "
        "one is found from it.",
    )
    @click.option(
        "--output",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="table for people, json for scripts.",
    )
    @click.option(
        "--timeout-ms",
        type=click.IntRange(min=1),
        default=DEFAULT_TIMEOUT_MS,
        show_default=True,
        help="Give up after this long, retries included.",
    )
    @click.option(
        "--consistency",
        type=click.Choice([c.value for c in ReadConsistency]),
        default=ReadConsistency.LINEARIZABLE.value,
        show_default=True,
        help="Reads only. linearizable: the active controller confirms with the quorum "
        "that it still leads, so the answer includes every write acknowledged before. "
        "stale: any controller answers at once from what it has committed (may be "
        "behind; works without a leader); the offset read at is printed on stderr.",
    )
    @click.option(
        "--min-offset", type=click.IntRange(min=0), default=0, show_default=True,
        help="Reads only: answer from state at least this new (a committed end offset, "
        "e.g. one an earlier stale read printed); a controller that has not applied "
        "that far waits a moment, then says how far behind it is.",
    )
    @command_config_option
    @functools.wraps(command)
    def wrapper(
        *args: Any, bootstrap: str, output: str, timeout_ms: int, consistency: str,
        min_offset: int, command_config: Path | None, **kwargs: Any
    ) -> Any:
        try:
            addresses = tuple(parse_bootstrap([bootstrap]))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--bootstrap") from exc
        opts = AdminOptions(addresses, output, timeout_ms, load_command_config(command_config),
                            ReadConsistency(consistency), min_offset)
        return command(*args, opts=opts, **kwargs)

    return wrapper  # type: ignore[return-value]


def run_admin(opts: AdminOptions, action: Callable[[AdminClient], int]) -> None:
    """Run ``action`` with a client; turn client errors into messages and exit codes."""
    code = EXIT_OK
    try:
        with AdminClient(opts.bootstrap, timeout_ms=opts.timeout_ms, tls=opts.tls,
                         consistency=opts.consistency) as client:
            client.session_offset = opts.min_offset
            code = action(client)
            if opts.consistency is ReadConsistency.STALE and client.last_read_offset is not None:
                offset, known = client.last_read_offset, client.last_high_watermark
                behind = "" if known is None else \
                    f"; {max(0, known - offset)} behind the high watermark it knew, {known}"
                click.echo(f"(stale read at committed offset {offset}{behind})", err=True)
    except (ControllerUnreachableError, ControllerOverloadedError) as exc:
        click.echo(f"error: {exc}", err=True)
        code = EXIT_UNREACHABLE
    except OutcomeUnknownError as exc:
        click.echo(f"error: outcome unknown: {exc}", err=True)
        code = EXIT_OUTCOME_UNKNOWN
    except RequestFailedError as exc:
        click.echo(f"error: the controller refused the request: {exc}", err=True)
        code = EXIT_ITEM_FAILED
    sys.exit(code)


# -- rendering --------------------------------------------------------------------------


def to_jsonable(value: Any) -> Any:
    """attrs values, enums, tuples → JSON-ready data (enums by value, or name for ints)."""
    if attrs.has(type(value)):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in attrs.fields(type(value))}
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value.value, str) else value.name
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


def emit_json(value: Any) -> None:
    click.echo(json.dumps(to_jsonable(value), indent=2, sort_keys=False))


def console() -> Console:
    # Not a terminal (a pipe, a test): a wide fixed width so cells are not wrapped.
    out = Console()
    return out if out.is_terminal else Console(width=200, no_color=True)


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]], *,
          header: bool = True) -> Table:
    """`header` False: a key / value listing (no header row of empty names)."""
    result = Table(title=title, title_justify="left", show_header=header)
    for column in columns:
        result.add_column(column)
    for row in rows:
        result.add_row(*("" if cell is None else str(cell) for cell in row))
    return result


def status(error: ApiError) -> str:
    return "OK" if error.ok else str(error)


def ids(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


def report(
    opts: AdminOptions,
    results: Sequence[Any],
    *,
    title: str,
    columns: Sequence[str],
    row: Callable[[Any], Sequence[object]],
    name: Callable[[Any], str],
    ok: Callable[[Any], bool] = lambda r: bool(r.error.ok),
) -> int:
    """Print per-item results (each has ``.error``); 1 if any failed (not `ok`),
    else 0."""
    failed = [r for r in results if not ok(r)]
    if opts.json:
        emit_json(list(results))
    else:
        console().print(table(title, columns, [row(r) for r in results]))
        for result in failed:
            click.echo(f"error: {name(result)}: {result.error}", err=True)
        if failed:
            click.echo(f"{len(failed)} of {len(results)} items failed", err=True)
    return EXIT_ITEM_FAILED if failed else EXIT_OK


def broker_ids(text: str, option: str) -> tuple[int, ...]:
    """A comma-separated list of broker ids (ASCII digits only: `int` would also take
    "1_0" and other scripts' digits)."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not all(part.isascii() and part.isdigit() for part in parts):
        raise click.BadParameter(f"{text!r} is not a list of broker ids like 1,2,3",
                                 param_hint=option)
    if not parts:
        raise click.BadParameter("give at least one broker id", param_hint=option)
    return tuple(int(part) for part in parts)


def key_value(text: str, option: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"{text!r} is not KEY=VALUE", param_hint=option)
    return key, value


def human_bytes(count: int) -> str:
    if count < 0:
        return "?"
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
