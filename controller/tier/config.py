"""`TierConfig`: the `[tier]` section of a controller's config."""

from __future__ import annotations

import attrs

from controller.tier.remote import parse_tier_url


def _url(_inst: object, _attr: attrs.Attribute[str], value: str) -> None:
    parse_tier_url(value)  # ValueError names what is wrong


def _positive(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0:
        raise ValueError(f"tier.{attribute.name} must be > 0, got {value}")


def _limit(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < -1:
        raise ValueError(f"tier.{attribute.name} must be >= 0, or -1 for no limit; "
                         f"got {value}")


@attrs.frozen(kw_only=True)
class TierConfig:
    url: str = attrs.field(validator=_url)
    # S3 credentials; None: the standard AWS environment (variables, profile, role).
    access_key_id: str | None = attrs.field(default=None, repr=False)
    secret_access_key: str | None = attrs.field(default=None, repr=False)
    # How often the copier looks for work when it found none last time.
    copy_interval_ms: int = attrs.field(default=1_000, validator=_positive)
    # A copy another leader started and did not finish within this is abandoned
    # (its objects deleted).
    copy_timeout_ms: int = attrs.field(default=30_000, validator=_positive)
    # Retries after a failure back off from copy_interval_ms up to this.
    max_backoff_ms: int = attrs.field(default=30_000, validator=_positive)
    # Local segments (already tiered and below a snapshot) are deleted once older than
    # this or beyond this many bytes of newer local log; -1: that limit is off.
    local_retention_ms: int = attrs.field(default=600_000, validator=_limit)
    local_retention_bytes: int = attrs.field(default=-1, validator=_limit)
    # Remote objects are deleted once older than this or beyond this many bytes of
    # newer log in the tier; -1 (default): keep the whole history.
    retention_ms: int = attrs.field(default=-1, validator=_limit)
    retention_bytes: int = attrs.field(default=-1, validator=_limit)
    # Bytes per second the copier uploads at most, averaged (-1: no limit): keeps a
    # catching-up copier from taking the link the controllers replicate over.
    copy_max_bytes_per_second: int = attrs.field(default=-1, validator=_limit)

    def __attrs_post_init__(self) -> None:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("tier.access_key_id and tier.secret_access_key go together")
        if self.access_key_id is not None and parse_tier_url(self.url).scheme != "s3":
            raise ValueError("tier credentials are for an s3:// tier")
