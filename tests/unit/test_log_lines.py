"""The log line formats: what an operator's tools parse (logfmt or JSON)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from controller.log import formatter, get_logger, render_logfmt


@pytest.fixture
def lines(request: pytest.FixtureRequest) -> Iterator[tuple[io.StringIO, logging.Handler]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield out, handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def test_logfmt_quotes_and_escapes_values() -> None:
    line = render_logfmt({"event": "x", "ts": "T", "level": "info", "logger": "l",
                          "plain": "abc", "space": "a b", "eq": "a=b",
                          "quote": 'say "hi"', "back": "c:\\d", "back_space": "c:\\d e",
                          "newline": "a\nb", "none": None, "yes": True, "no": False,
                          "n": 3, "items": ["t1", "t2"]})
    assert line == ('ts=T level=info logger=l event=x plain=abc space="a b" eq="a=b" '
                    'quote="say \\"hi\\"" back=c:\\d back_space="c:\\\\d e" '
                    'newline=a\\nb none= yes=true no=false n=3 items="[\\"t1\\",\\"t2\\"]"')


def test_logfmt_puts_the_head_first_and_renders_a_missing_head_key_empty() -> None:
    assert render_logfmt({"b": 1, "event": "e", "a": 2}) == "ts= level= logger= event=e b=1 a=2"


def test_logfmt_refuses_a_key_with_a_space() -> None:
    with pytest.raises(ValueError, match="invalid log key"):
        render_logfmt({"event": "e", "bad key": 1})


def test_structured_events_and_foreign_records_render_as_one_line_each(
        lines: tuple[io.StringIO, logging.Handler]) -> None:
    out, handler = lines
    handler.setFormatter(formatter("kv"))
    get_logger("metakraft.test").info("leader_change", leader=2, epoch=7, why="timed out")
    logging.getLogger("grpc.lib").warning("socket %s closed", "s1")
    first, second = out.getvalue().splitlines()
    assert first.startswith("ts=") and first.endswith(
        ' level=info logger=metakraft.test event=leader_change leader=2 epoch=7 '
        'why="timed out"')
    assert second.startswith("ts=") and second.endswith(
        ' level=warning logger=grpc.lib event="socket s1 closed"')


def test_json_lines_keep_types_and_start_with_the_head(
        lines: tuple[io.StringIO, logging.Handler]) -> None:
    out, handler = lines
    handler.setFormatter(formatter("json"))
    get_logger("metakraft.test").info("admin_write", count=3, gone=None, ok=True,
                                      request={"topics": ["a"]}, at=object)
    (line,) = out.getvalue().splitlines()
    event = json.loads(line)
    assert list(event)[:4] == ["ts", "level", "logger", "event"]
    assert event["count"] == 3 and event["gone"] is None and event["ok"] is True
    assert event["request"] == {"topics": ["a"]} and event["at"] == str(object)


def test_an_exception_is_rendered_as_a_field_of_its_line(
        lines: tuple[io.StringIO, logging.Handler]) -> None:
    out, handler = lines
    handler.setFormatter(formatter("json"))
    try:
        raise RuntimeError("disk on fire")
    except RuntimeError:
        get_logger("metakraft.test").exception("snapshot_failed", end_offset=9)
        logging.getLogger("lib").exception("lib failed")
    ours, theirs = (json.loads(x) for x in out.getvalue().splitlines())
    for event in (ours, theirs):
        assert event["level"] == "error"
        assert "Traceback" in event["exception"]
        assert "RuntimeError: disk on fire" in event["exception"]
    assert ours["end_offset"] == 9 and theirs["event"] == "lib failed"


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="kv, json"):
        formatter("xml")
