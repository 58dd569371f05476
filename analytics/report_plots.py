"""The audit report's plots (matplotlib). `draw_*` make a figure from collected rows
(the notebooks show them inline); the report's functions save them as PNG files. A
plot with nothing to show is not drawn (None): the report says so in words instead
of showing an empty chart."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analytics.report_render import Plot

# At most this many fenced periods are drawn (the table and the counts have them all).
PLOT_INTERVALS = 2_000


# (longest log span, bucket as a Spark interval, its seconds, its name): a short log's
# records in one bar per minute would say little, a day's in one per 10 s too much.
_BUCKETS = ((600, "10 seconds", 10, "10 s"), (6 * 3600, "1 minute", 60, "minute"),
            (7 * 86400, "10 minutes", 600, "10 minutes"), (None, "1 hour", 3600, "hour"))


def bucket_for(span_s: float) -> tuple[str, int, str]:
    """The time bucket for records per type over a log spanning `span_s` seconds:
    (Spark interval for `audit.records_per_type`, seconds, name)."""
    for longest, interval, seconds, name in _BUCKETS:
        if longest is None or span_s <= longest:
            return interval, seconds, name
    raise AssertionError("unreachable")


def records_per_type(per_type: Sequence[Any], bucket_s: int, out: Path) -> Plot | None:
    fig = draw_records_per_type(per_type, bucket_s)
    return None if fig is None else _save(fig, out / "records_per_type.png",
                                          "Records appended, by type, over time")


def draw_records_per_type(per_type: Sequence[Any], bucket_s: int = 60) -> Any:
    """`audit.records_per_type` rows (buckets of `bucket_s`): stacked bars, one per
    bucket."""
    if not per_type:
        return None
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    # Stacked bars, one per minute: the total is the height, each type its share (a
    # line per type joined the few points of a short log into misleading slopes).
    kinds = sorted({r["record_type"] for r in per_type},
                   key=lambda k: -sum(r["records"] for r in per_type if r["record_type"] == k))
    buckets = sorted({r["bucket_start"] for r in per_type})
    count = {(r["record_type"], r["bucket_start"]): r["records"] for r in per_type}
    colors = [plt.get_cmap("tab20")(i) for i in range(20)]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    bottom = [0] * len(buckets)
    for i, kind in enumerate(kinds):
        heights = [count.get((kind, b), 0) for b in buckets]
        ax.bar(buckets, heights, bottom=bottom, width=0.8 * bucket_s / 86400, align="edge",
               label=kind,
               color=colors[i % len(colors)])
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, max(bottom) * 1.08)  # the tallest stack whole, with room above
    name = {s: n for _, _, s, n in _BUCKETS}.get(bucket_s, f"{bucket_s} s")
    ax.set_title(f"Records per type per {name}")
    ax.set_ylabel(f"records per {name}")
    ax.set_xlabel("append time (UTC)")
    # Outside the axes, on the right: inside it covered the lines.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.autofmt_xdate()
    return fig


def leader_changes(churn: Sequence[Any], out: Path) -> Plot | None:
    fig = draw_leader_changes(churn)
    return None if fig is None else _save(
        fig, out / "leader_changes_per_broker.png",
        "Leaderships each broker gained and lost over the log")


def draw_leader_changes(churn: Sequence[Any]) -> Any:
    """`audit.leader_churn_per_broker` rows: gained up, lost down, per broker."""
    if not churn:
        return None
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ids = [str(r["broker_id"]) for r in churn]  # categories: integer labels
    ax.bar(ids, [r["gained"] for r in churn], label="leaderships gained", color="tab:blue")
    ax.bar(ids, [-r["lost"] for r in churn], label="leaderships lost", color="tab:orange")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_title("Leader changes per broker")
    ax.set_xlabel("broker id")
    ax.set_ylabel("partitions (gained up, lost down)")
    ax.legend(fontsize=8)
    return fig


def fencing_timeline(fencing: Sequence[Any], last_time: Any, out: Path) -> Plot | None:
    fig = draw_fencing_timeline(fencing, last_time)
    return None if fig is None else _save(fig, out / "broker_fencing_timeline.png",
                                          "When each broker was fenced (no bar: in service)")


# Bars by why the broker was fenced (`audit.fencing_intervals`' cause).
_FENCE_COLORS = {"fenced": "tab:red", "controlled_shutdown": "tab:blue",
                 "registered": "tab:gray"}


def draw_fencing_timeline(fencing: Sequence[Any], last_time: Any) -> Any:
    """`audit.fencing_intervals` rows (an open period ends at `last_time`): one bar per
    fenced period, one row per broker."""
    drawn = [r for r in fencing[:PLOT_INTERVALS] if r["fenced_time"] is not None]
    if not drawn:
        return None
    import matplotlib.pyplot as plt

    brokers = sorted({r["broker_id"] for r in drawn})
    row = {b: i for i, b in enumerate(brokers)}
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.45 * len(brokers)))
    for r in drawn:
        stop = r["unfenced_time"] or last_time
        color = _FENCE_COLORS.get(r["cause"], "tab:gray")
        if stop is not None and stop > r["fenced_time"]:
            ax.plot([r["fenced_time"], stop], [row[r["broker_id"]]] * 2, linewidth=8,
                    solid_capstyle="butt", color=color)
        else:  # fenced as the log ends (a bar of no length): a mark
            ax.plot([r["fenced_time"]], [row[r["broker_id"]]], marker="s", markersize=8,
                    color=color)
    # One row per broker, labelled with its id (not a numeric axis: 1.0, 1.5, ...).
    ax.set_yticks(range(len(brokers)), [str(b) for b in brokers])
    ax.set_ylim(-0.7, len(brokers) - 0.3)
    ax.set_ylabel("broker id")
    ax.set_xlabel("append time (UTC)")
    cut = len(fencing) > PLOT_INTERVALS
    ax.set_title("Broker fenced periods (red: session expired, blue: stopped cleanly, "
                 "grey: starting up)"
                 + (f"; the first {PLOT_INTERVALS}" if cut else ""))
    fig.autofmt_xdate()
    return fig


def violations(counts: dict[str, int], out: Path) -> Plot | None:
    """Only the failing checks (a chart of zeros says less than one line of text)."""
    failing = {name: n for name, n in counts.items() if n}
    if not failing:
        return None
    import matplotlib.pyplot as plt

    names = sorted(failing, key=failing.__getitem__)
    fig, ax = plt.subplots(figsize=(8, 1 + 0.4 * len(names)))
    ax.barh(names, [failing[n] for n in names], color="tab:red")
    ax.set_xlabel("rows at fault")
    ax.set_title("Failing checks")
    return _save(fig, out / "invariant_violations.png", "Rows at fault per failing check")


def _save(fig: Any, path: Path, caption: str) -> Plot:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Plot(path.name, caption)
