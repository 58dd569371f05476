"""The `metakraft audit` report: every audit and invariant, Markdown + PNG plots.

`run_audit(spark, log_dir, out_dir, progress)` loads the log once (cached), runs the
audit functions and the invariant checks, writes `report.md` and the plots into
`out_dir`, and returns the violation counts (the CLI exits 1 if any is non-zero).
Only small results are collected to the driver: tables are cut to `max_rows` and
the plots are drawn from aggregates.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

import analytics
from analytics import audit
from analytics.invariants import INVARIANTS

Progress = Callable[[str], None]

SECTIONS: tuple[tuple[str, Callable[[DataFrame], DataFrame]], ...] = (
    ("Topic lifecycle", audit.topic_lifecycle),
    ("Broker timeline", audit.broker_timeline),
    ("Fencing intervals", audit.fencing_intervals),
    ("Leader churn per broker", audit.leader_churn_per_broker),
    ("Leader churn per partition", audit.leader_churn_per_partition),
    ("ISR shrinks and expansions", audit.isr_changes),
    ("Reassignments", audit.reassignments),
    ("Config history", audit.config_history),
    ("Elections per controller epoch", audit.elections_per_epoch),
    ("Unclean elections", audit.unclean_elections),
)


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")[:80]


def markdown_table(rows: list[Any], columns: list[str]) -> str:
    if not rows:
        return "_none_\n"
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(_cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(out) + "\n"


def _plots(df: DataFrame, out: Path, violations: dict[str, int]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers
    import matplotlib.pyplot as plt

    made: list[str] = []
    per_type = audit.records_per_type(df, "1 minute").collect()
    fig, ax = plt.subplots(figsize=(9, 4))
    kinds = sorted({r["record_type"] for r in per_type})
    for kind in kinds:
        pts = sorted((r["bucket_start"], r["records"]) for r in per_type
                     if r["record_type"] == kind)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=kind)
    ax.set_title("Records per type per minute")
    ax.set_ylabel("records")
    if kinds:
        ax.legend(fontsize=7)
    fig.autofmt_xdate()
    made.append(_save(fig, out / "records_per_type.png"))

    churn = audit.leader_churn_per_broker(df).collect()
    fig, ax = plt.subplots(figsize=(6, 4))
    ids = [str(r["broker_id"]) for r in churn]
    ax.bar(ids, [r["gained"] for r in churn], label="gained")
    ax.bar(ids, [-r["lost"] for r in churn], label="lost")
    ax.set_title("Leader changes per broker")
    ax.set_xlabel("broker")
    ax.legend()
    made.append(_save(fig, out / "leader_changes_per_broker.png"))

    fencing = audit.fencing_intervals(df).collect()
    end = df.agg({"append_time": "max"}).first()
    last_time = end[0] if end is not None else None
    fig, ax = plt.subplots(figsize=(9, 3))
    for r in fencing:
        stop = r["unfenced_time"] or last_time
        if r["fenced_time"] is not None and stop is not None:
            ax.plot([r["fenced_time"], stop], [r["broker_id"]] * 2, linewidth=6,
                    color="tab:red" if r["cause"] == "fenced" else "tab:gray")
    ax.set_title("Broker fenced periods (red: fenced by failure, grey: start-up)")
    ax.set_ylabel("broker")
    fig.autofmt_xdate()
    made.append(_save(fig, out / "broker_fencing_timeline.png"))

    fig, ax = plt.subplots(figsize=(7, 3))
    names = list(violations)
    ax.barh(names, [violations[n] for n in names],
            color=["tab:red" if violations[n] else "tab:green" for n in names])
    ax.set_title("Open invariant violations")
    fig.tight_layout()
    made.append(_save(fig, out / "invariant_violations.png"))
    return made


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def run_audit(spark: SparkSession, log_dir: str, out_dir: str | Path,
              progress: Progress = print, *, max_rows: int = 200,
              snapshots: bool = False) -> dict[str, int]:
    """Run everything, write `out_dir/report.md` and plots; return violations per check."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    progress(f"reading {log_dir}")
    df = analytics.load(spark, log_dir, snapshots=snapshots).cache()
    total = df.count()
    stats = df.agg({"offset": "max", "epoch": "max"}).first()
    progress(f"{total} records read ({time.monotonic() - started:.1f} s)")
    body: list[str] = []
    for title, fn in SECTIONS:
        progress(f"audit: {title}")
        result = fn(df)
        rows = result.limit(max_rows).collect()
        body.append(f"## {title}\n\n" + markdown_table(rows, result.columns))
    violations: dict[str, int] = {}
    details: list[str] = []
    for name, check in INVARIANTS.items():
        progress(f"invariant: {name}")
        bad = check(df)
        rows = bad.limit(max_rows).collect()
        count = bad.count() if len(rows) == max_rows else len(rows)
        violations[name] = count
        status = "OK" if count == 0 else f"**{count} violating rows**"
        details.append(f"### {name}: {status}\n\n" + (markdown_table(rows, bad.columns)
                                                       if count else ""))
    progress("plots")
    plots = _plots(df, out, violations)
    head = [
        "# metakraft audit report\n",
        f"- log: `{log_dir}`",
        f"- records: {total}; last offset: {stats[0] if stats else None}; "
        f"highest Raft epoch: {stats[1] if stats else None}",
        f"- invariants violated: {sum(1 for v in violations.values() if v)} of "
        f"{len(violations)}",
        f"- elapsed: {time.monotonic() - started:.1f} s\n",
        "## Plots\n",
        *[f"![{p}]({p})\n" for p in plots],
        "## Invariants\n",
        *details,
    ]
    (out / "report.md").write_text("\n".join(head + body))
    df.unpersist()
    progress(f"report written to {out / 'report.md'}")
    return violations
