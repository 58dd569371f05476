"""The audit's tier check: the tier's hash chain against the log's record of it.

The tier's objects were read (and each checked against its manifest's CRC-32C and
SHA-256) by the source; here the manifests are listed once more on the driver and
`controller.tier.chain.check_chain` compares them, and the links between them, with
the tier records of the rows read (a few per object: collected to the driver).
"""

from __future__ import annotations

import json

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analytics.audit import log_rows
from analytics.report_render import Block, Bullets, Heading, Text
from controller.records.jsonify import record_from_dict
from controller.tier.chain import ChainReport, TierLedger, check_chain
from controller.tier.history import list_tier
from controller.tier.remote import open_store

TITLE = "Tier history (hash chain)"
TIER_RECORD_TYPES = ("remote_log_segment", "remote_log_segment_state_change")


def tier_chain_report(rows: DataFrame, tier_url: str, *, complete: bool) -> ChainReport:
    """`complete`: the rows run to a controller's log end (a local log was read)."""
    ledger = TierLedger()
    bounds = log_rows(rows).agg(F.min("offset"), F.max("offset")).first()
    found = (log_rows(rows).where(F.col("record_type").isin(*TIER_RECORD_TYPES))
             .select("offset", "record_json").orderBy("offset").collect())
    for row in found:
        ledger.add(row["offset"], record_from_dict(json.loads(row["record_json"])))
    if bounds is not None and bounds[0] is not None:
        ledger.first_offset, ledger.end_offset = bounds[0], bounds[1] + 1
    listing = list_tier(open_store(tier_url))
    return check_chain(listing.segments, listing.snapshots, ledger, complete=complete)


def tier_chain_section(rows: DataFrame, tier_url: str, *, complete: bool,
                       max_rows: int) -> tuple[int, list[Block]]:
    """(findings, the report's section)."""
    report = tier_chain_report(rows, tier_url, complete=complete)
    blocks: list[Block] = [Heading(TITLE), Text(report.summary().capitalize() + ".")]
    if report.findings:
        blocks += [Text(f"**{len(report.findings)} finding(s)**: the tier does not hold the "
                        "history the log recorded (the first is where it starts)."),
                   Bullets(tuple(str(f) for f in report.findings[:max_rows]))]
    else:
        blocks.append(Text("Every hashed object is the one the log recorded, and each log "
                           "object chains to the one before it."))
    return len(report.findings), blocks
