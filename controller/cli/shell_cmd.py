"""`metakraft shell`: browse the metadata image as a file tree (kafka-metadata-shell).

    metakraft shell --snapshot FILE                    a snapshot file
    metakraft shell --log-dir DIR [--at-offset N]       a controller's log on disk
    metakraft shell --tier URL [--log-dir DIR] [--at-offset N]   the whole history
    metakraft shell --bootstrap HOST:PORT,...           a live quorum, following commits

Commands: ls, cd, pwd, cat, find, tree, help, exit (paths may hold globs). With
`-c 'cmd; cmd'` the commands run and the shell exits (1 if one failed); without a
terminal, commands are read from stdin. The tree's layout: shell_view.py.
"""

from __future__ import annotations

import asyncio
import fnmatch
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import attrs
import click

from controller.cli.admin_output import (
    EXIT_ITEM_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    command_config_option,
    load_command_config,
)
from controller.cli.shell_sources import (
    ImageBuilder,
    LiveFollower,
    ShellSourceError,
    from_files,
    from_snapshot,
)
from controller.cli.shell_view import (
    Dir,
    ImageSource,
    PathError,
    expand,
    lookup,
    normalize,
    root,
    show,
    sorted_names,
    walk,
)
from controller.security.tls import TlsCredentials

HELP = """\
ls [PATH...]              list a directory (a trailing / marks directories)
cd [PATH]                 change directory (default /)
pwd                       print the current directory
cat PATH...               print files
find [PATH] [-name GLOB]  every path below PATH (whose name matches GLOB)
tree [PATH]               the tree below PATH
help                      this text
exit, quit                leave (also Ctrl-D)
Paths are absolute or relative; `..` and globs (*, ?, [..]) work. The layout:
/offset /brokers/ID /topics/NAME/{id,PARTITION} /topicIds/ID /configs/{topic,broker,
cluster}/NAME /acls/ID /features/NAME /quorum/{leader,voters} /tier/OBJECT"""

COMMANDS = ("ls", "cd", "pwd", "cat", "find", "tree", "help", "exit", "quit")


@attrs.define
class Outcome:
    out: list[str] = attrs.field(factory=list)
    err: list[str] = attrs.field(factory=list)
    leave: bool = False


class Shell:
    """The command interpreter: a working directory over an image that may move on
    between commands (a live quorum); every command reads the image as it is then."""

    def __init__(self, image: Callable[[], ImageSource]) -> None:
        self._image = image
        self.cwd: tuple[str, ...] = ()

    def top(self) -> Dir:
        return root(self._image())

    def prompt(self) -> str:
        return f"metakraft:{show(self.cwd)} (offset {self._image().offset})> "

    def run(self, words: list[str]) -> Outcome:
        result = Outcome()
        if not words:
            return result
        name, args = words[0], words[1:]
        handler = getattr(self, f"_cmd_{name}", None)
        if name not in COMMANDS or handler is None:
            result.err.append(f"{name}: unknown command (try help)")
            return result
        try:
            handler(args, result)
        except PathError as exc:
            result.err.append(f"{name}: {exc}")
        return result

    def run_line(self, line: str) -> Outcome:
        """One line (`;` separates commands); stops at `exit`."""
        total = Outcome()
        try:
            commands = split_commands(line)
        except ValueError as exc:
            total.err.append(f"cannot parse {line!r}: {exc}")
            return total
        for words in commands:
            one = self.run(words)
            total.out += one.out
            total.err += one.err
            if one.leave:
                total.leave = True
                break
        return total

    # -- commands ----------------------------------------------------------------------

    def _cmd_help(self, _args: list[str], result: Outcome) -> None:
        result.out.append(HELP)

    def _cmd_exit(self, _args: list[str], result: Outcome) -> None:
        result.leave = True

    _cmd_quit = _cmd_exit

    def _cmd_pwd(self, _args: list[str], result: Outcome) -> None:
        result.out.append(show(self.cwd))

    def _cmd_cd(self, args: list[str], result: Outcome) -> None:
        if len(args) > 1:
            result.err.append("cd: one path at most")
            return
        target = normalize(self.cwd, args[0] if args else "/")
        if not isinstance(lookup(self.top(), target), Dir):
            raise PathError(f"{show(target)}: not a directory")
        self.cwd = target

    def _cmd_ls(self, args: list[str], result: Outcome) -> None:
        top = self.top()
        paths = [p for pattern in (args or ["."]) for p in expand(top, self.cwd, pattern)]
        for i, parts in enumerate(paths):
            node = lookup(top, parts)
            if len(paths) > 1 and isinstance(node, Dir):
                result.out.append(("\n" if i else "") + f"{show(parts)}:")
            if isinstance(node, Dir):
                children = node.children()
                result.out.extend(name + ("/" if isinstance(children[name], Dir) else "")
                                  for name in sorted_names(list(children)))
            else:
                result.out.append(parts[-1])

    def _cmd_cat(self, args: list[str], result: Outcome) -> None:
        if not args:
            result.err.append("cat: which file?")
            return
        top = self.top()
        for pattern in args:
            for parts in expand(top, self.cwd, pattern):
                node = lookup(top, parts)
                if isinstance(node, Dir):
                    result.err.append(f"cat: {show(parts)}: is a directory")
                else:
                    result.out.append(node.read())

    def _cmd_find(self, args: list[str], result: Outcome) -> None:
        name_glob: str | None = None
        if "-name" in args:
            i = args.index("-name")
            if i + 1 >= len(args):
                result.err.append("find: -name needs a pattern")
                return
            name_glob = args[i + 1]
            args = args[:i] + args[i + 2:]
        top = self.top()
        for pattern in args or ["."]:
            for start in expand(top, self.cwd, pattern):
                for parts, node in walk(lookup(top, start), start):
                    if name_glob is None or (parts and fnmatch.fnmatchcase(parts[-1], name_glob)):
                        result.out.append(show(parts) + ("/" if isinstance(node, Dir)
                                                         and parts else ""))

    def _cmd_tree(self, args: list[str], result: Outcome) -> None:
        top = self.top()
        for pattern in args or ["."]:
            for start in expand(top, self.cwd, pattern):
                for parts, node in walk(lookup(top, start), start):
                    depth = len(parts) - len(start)
                    label = show(parts) if depth == 0 else parts[-1]
                    result.out.append("  " * depth + label
                                      + ("/" if isinstance(node, Dir) and depth else ""))


def split_commands(line: str) -> list[list[str]]:
    """`line`'s commands, split at `;` (outside quotes) into words."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if set(token) == {";"}:  # one or more separators (";;" is one token)
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def complete(shell: Shell, text: str) -> Iterator[tuple[str, int]]:
    """Completions for `text` (the line up to the cursor): (completion, how many
    characters before the cursor it replaces)."""
    words = text.split()
    current = "" if not words or text.endswith(" ") else words[-1]
    if len(words) == 0 or (len(words) == 1 and current):
        for name in COMMANDS:
            if name.startswith(current):
                yield name, len(current)
        return
    folder, slash, prefix = current.rpartition("/")
    try:
        node = lookup(shell.top(), normalize(shell.cwd, folder + slash if slash else "."))
    except PathError:
        return
    if not isinstance(node, Dir):
        return
    children = node.children()
    for name in sorted_names([n for n in children if n.startswith(prefix)]):
        yield name + ("/" if isinstance(children[name], Dir) else ""), len(prefix)


def _print(outcome: Outcome) -> None:
    for text in outcome.out:
        click.echo(text)
    for text in outcome.err:
        click.echo(text, err=True)


def run_script(shell: Shell, lines: Iterable[str]) -> int:
    """Run commands line by line; 1 if any failed, else 0."""
    failed = False
    for line in lines:
        outcome = shell.run_line(line)
        _print(outcome)
        failed |= bool(outcome.err)
        if outcome.leave:
            break
    return EXIT_ITEM_FAILED if failed else EXIT_OK


async def run_stdin(shell: Shell) -> int:
    """`run_script` of stdin's lines as they come, the event loop free meanwhile (a
    live image keeps following the quorum between commands)."""
    failed = False
    while line := await asyncio.to_thread(sys.stdin.readline):
        outcome = shell.run_line(line)
        _print(outcome)
        failed |= bool(outcome.err)
        if outcome.leave:
            break
    return EXIT_ITEM_FAILED if failed else EXIT_OK


async def interactive(shell: Shell, banner: str) -> None:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import CompleteEvent, Completer, Completion
    from prompt_toolkit.document import Document

    class ShellCompleter(Completer):
        def get_completions(self, document: Document, complete_event: CompleteEvent
                            ) -> Iterator[Completion]:
            for word, replaced in complete(shell, document.text_before_cursor):
                yield Completion(word, start_position=-replaced)

    click.echo(banner)
    session: PromptSession[str] = PromptSession(completer=ShellCompleter(),
                                               complete_while_typing=False)
    while True:
        try:
            line = await session.prompt_async(shell.prompt)
        except KeyboardInterrupt:
            continue
        except EOFError:
            return
        outcome = shell.run_line(line)
        _print(outcome)
        if outcome.leave:
            return


@click.command("shell")
@click.option("--snapshot", type=click.Path(dir_okay=False, path_type=Path),
              help="A snapshot file (a controller's data dir, snapshots/*.checkpoint).")
@click.option("--log-dir", type=click.Path(file_okay=False, path_type=Path),
              help="A controller's data directory (or its metadata/ directory): its newest "
              "snapshot then its log.")
@click.option("--tier", metavar="URL", help="The remote tier (file:///path or "
              "s3://bucket/prefix?endpoint=...): its snapshots and segments, then those "
              "of --log-dir if given, as one history.")
@click.option("--at-offset", type=click.IntRange(min=0), help="The image at this offset "
              "(with --log-dir or --tier): the newest snapshot at or below it, then the "
              "log up to it.")
@click.option("--bootstrap", "--bootstrap-server", "bootstrap", envvar="METAKRAFT_BOOTSTRAP",
              help="Follow a live quorum (controller addresses HOST:PORT,...; env "
              "METAKRAFT_BOOTSTRAP): as a Raft observer, the image moves on as records "
              "commit. Over TLS the certificate needs CLUSTER_ACTION (a super user has it).")
@command_config_option
@click.option("-c", "--command", "command", metavar="COMMANDS",
              help="Run these commands (separated by ;) and exit: 1 if one failed.")
@click.option("--timeout-ms", type=click.IntRange(min=1), default=30_000, show_default=True,
              help="With --bootstrap: how long to wait to catch up with the quorum.")
def shell(snapshot: Path | None, log_dir: Path | None, tier: str | None, at_offset: int | None,
          bootstrap: str | None, command_config: Path | None, command: str | None,
          timeout_ms: int) -> None:
    """Browse the metadata image as a file tree: topics, partitions, brokers, configs,
    ACLs, features, the quorum (like kafka-metadata-shell)."""
    from_env = click.get_current_context().get_parameter_source("bootstrap") is \
        click.core.ParameterSource.ENVIRONMENT
    if from_env and (snapshot or log_dir or tier):
        bootstrap = None  # METAKRAFT_BOOTSTRAP is a default, not a second source
    chosen = [name for name, value in (("--snapshot", snapshot), ("--bootstrap", bootstrap),
                                       ("--log-dir/--tier", log_dir or tier)) if value]
    if len(chosen) != 1:
        raise click.UsageError("give one image source: --snapshot FILE, --log-dir DIR and/or "
                               "--tier URL, or --bootstrap HOST:PORT,...")
    if at_offset is not None and not (log_dir or tier):
        raise click.UsageError("--at-offset goes with --log-dir or --tier")
    if bootstrap is not None:
        tls = load_command_config(command_config)
        sys.exit(asyncio.run(_live(bootstrap, tls, command, timeout_ms)))
    try:
        image = from_snapshot(snapshot) if snapshot is not None else \
            from_files(log_dir, tier, at_offset)
    except ShellSourceError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_UNREACHABLE)
    sh = Shell(lambda: image)
    if command is not None:
        sys.exit(run_script(sh, [command]))
    if not sys.stdin.isatty():
        sys.exit(run_script(sh, sys.stdin))
    asyncio.run(interactive(sh, f"metakraft shell: {image.description}, offset "
                                f"{image.offset} (help for commands)"))


async def _live(bootstrap: str, tls: TlsCredentials | None, command: str | None,
                timeout_ms: int) -> int:
    from controller.api.client import AdminClient, AdminClientError, parse_bootstrap

    try:
        addresses = parse_bootstrap([bootstrap])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--bootstrap") from None
    try:
        with AdminClient(addresses, tls=tls, timeout_ms=timeout_ms) as client:
            quorum = await asyncio.to_thread(client.describe_quorum)
    except AdminClientError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_UNREACHABLE
    voters = {v.replica_id: v.endpoint for v in quorum.voters if v.endpoint}
    if not voters or not quorum.cluster_id:
        click.echo("error: the quorum named no voter addresses (or no cluster id): a "
                   "controller older than this shell?", err=True)
        return EXIT_UNREACHABLE
    builder = ImageBuilder(f"live quorum {bootstrap}", quorum.cluster_id)
    follower = LiveFollower(builder, quorum.cluster_id, voters, tls)
    try:
        await follower.start(timeout_ms / 1000)
        sh = Shell(lambda: builder.source)
        if command is not None:
            return run_script(sh, [command])
        if not sys.stdin.isatty():
            return await run_stdin(sh)
        await interactive(sh, f"metakraft shell: following cluster {quorum.cluster_id} as "
                              f"observer {follower.node_id} (help for commands)")
        return EXIT_OK
    except ShellSourceError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_UNREACHABLE
    finally:
        await follower.stop()
