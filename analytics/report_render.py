"""The audit report as blocks (headings, text, tables, plots), written three ways:
`report.md` (Markdown, plots beside it as PNG files), `report.html` (one file, plots
embedded, nothing fetched from the network) and `summary.json` (the figures a
machine needs: spans, verdicts, counts)."""

from __future__ import annotations

import base64
import datetime
import html
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs


@attrs.frozen
class Heading:
    text: str
    level: int = 2


@attrs.frozen
class Text:
    """A paragraph; `**bold**` and `` `code` `` are the only markup."""

    text: str


@attrs.frozen
class Bullets:
    items: tuple[str, ...]


@attrs.frozen
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    # Rows left out (the table shows the first ones).
    more: int = 0


@attrs.frozen
class Plot:
    file: str
    caption: str


Block = Heading | Text | Bullets | Table | Plot


# A topic id or incarnation id (a UUID): shown by its first 8 characters in tables
# (enough to tell them apart in one cluster; summary.json and the data keep them whole).
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_VOTER = re.compile(r"(\d+/)([A-Za-z0-9_-]{22})\b")


def cell_text(value: Any) -> str:
    """A value as the report shows it (times to the millisecond, short ids)."""
    return _cell(value)


def _cell(value: Any) -> str:
    """A table cell as people read it: times to the millisecond (no trailing zeros of
    microseconds), ids short, one line, bounded."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return _cell("[" + ", ".join(_cell(v) for v in value) + "]")
    if isinstance(value, datetime.datetime):
        if value.year < 1971:  # no real append time (a formatted voter set)
            return "-"
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        millis = value.microsecond // 1000
        return text + (f".{millis:03d}" if millis else "")
    if isinstance(value, float):
        return f"{value:g}"
    text = _UUID.sub(lambda m: m.group(0)[:8] + "…", str(value))
    # A voter as id/directory id: the directory id shortened too.
    text = _VOTER.sub(lambda m: m.group(1) + m.group(2)[:8] + "…", text)
    return text.replace("\n", " ")[:120]


def to_markdown(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append("#" * block.level + " " + block.text + "\n")
        elif isinstance(block, Text):
            out.append(block.text + "\n")
        elif isinstance(block, Bullets):
            out.append("\n".join(f"- {item}" for item in block.items) + "\n")
        elif isinstance(block, Table):
            if not block.rows:
                out.append("_none_\n")
                continue
            lines = ["| " + " | ".join(block.columns) + " |", "|" + "---|" * len(block.columns)]
            lines += ["| " + " | ".join(_cell(v).replace("|", "\\|") for v in row) + " |"
                      for row in block.rows]
            if block.more:
                lines.append(f"\n_{block.more} more rows not shown_")
            out.append("\n".join(lines) + "\n")
        else:
            out.append(f"![{block.caption}]({block.file})\n")
    return "\n".join(out)


def _inline(text: str) -> str:
    """Escape, then the two markups: `code` and **bold**."""
    parts = html.escape(text).split("`")
    text = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    parts = text.split("**")
    return "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(parts))


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { border-bottom: 2px solid #444; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; }
th { background: #f0f0f0; } tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; border: 1px solid #eee; } figcaption { color: #555; font-size: 0.9em; }
code { background: #f3f3f3; padding: 0 0.2em; } .more { color: #777; font-style: italic; }
"""


def to_html(blocks: Sequence[Block], images: Path, title: str) -> str:
    """One self-contained page: the PNGs (read from `images`) embedded as data URIs."""
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
           f"</title><style>{_STYLE}</style></head><body>"]
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"<h{block.level}>{_inline(block.text)}</h{block.level}>")
        elif isinstance(block, Text):
            out.append(f"<p>{_inline(block.text)}</p>")
        elif isinstance(block, Bullets):
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in block.items)
                       + "</ul>")
        elif isinstance(block, Table):
            if not block.rows:
                out.append("<p class='more'>none</p>")
                continue
            head = "".join(f"<th>{html.escape(c)}</th>" for c in block.columns)
            body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row)
                           + "</tr>" for row in block.rows)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            if block.more:
                out.append(f"<p class='more'>{block.more} more rows not shown</p>")
        else:
            data = base64.b64encode((images / block.file).read_bytes()).decode()
            out.append(f"<figure><img alt='{html.escape(block.caption)}' "
                       f"src='data:image/png;base64,{data}'><figcaption>"
                       f"{html.escape(block.caption)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)


def write_report(out: Path, blocks: Sequence[Block], summary: dict[str, Any]) -> None:
    (out / "report.md").write_text(to_markdown(blocks))
    (out / "report.html").write_text(to_html(blocks, out, "metakraft audit report"))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
