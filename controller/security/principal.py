"""Who is calling: the principal of a gRPC peer, from its verified client certificate.

Principals are `User:<name>` strings (Kafka's form, so ACLs read the same). The name
comes from the peer certificate through mapping rules, modelled on Kafka's
`ssl.principal.mapping.rules`: each rule is tried in order against the subject
distinguished name as TLS reports it (e.g. ``O=metakraft,CN=admin``); the first that
matches gives the name.

    RULE:<regex>/<replacement>/[L|U]   a full match of <regex> gives <replacement>
                                       ($1.. are groups), optionally lower/upper-cased
    DEFAULT                            the subject CN; a certificate without one gives
                                       its first subject alternative name

A connection without TLS has no identity: its principal is `User:ANONYMOUS`, which
only `allow_everyone_if_no_acl_found` or an ACL for `User:*` / `User:ANONYMOUS` lets
in. A certificate no rule maps is refused (it never becomes ANONYMOUS).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import attrs

ANONYMOUS = "User:ANONYMOUS"
USER_PREFIX = "User:"
DEFAULT_RULES = ("DEFAULT",)
# A rule list and each rule are operator input: bounded.
MAX_RULES = 64
MAX_RULE_CHARS = 1024
_RULE = re.compile(r"^RULE:(?P<pattern>(?:[^/\\]|\\.)+)/(?P<replacement>(?:[^/\\]|\\.)*)/"
                   r"(?P<case>[LU]?)$")


class PrincipalMappingError(ValueError):
    """A mapping rule does not parse, or a certificate maps to no principal."""


@attrs.frozen
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str

    def apply(self, subject: str, common_name: str, alt_names: Sequence[str]) -> str | None:
        if self.pattern is None:
            return common_name or (alt_names[0] if alt_names else None)
        match = self.pattern.fullmatch(subject)
        if match is None:
            return None
        # Kafka writes groups as $1; Python's expand wants \1.
        name = match.expand(re.sub(r"\$(\d+)", r"\\\1", self.replacement))
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def _parse_rule(text: str) -> _Rule:
    text = text.strip()
    if len(text) > MAX_RULE_CHARS:
        raise PrincipalMappingError(f"a principal mapping rule is longer than "
                                    f"{MAX_RULE_CHARS} characters")
    if text == "DEFAULT":
        return _Rule(None, "", "")
    found = _RULE.match(text)
    if found is None:
        raise PrincipalMappingError(
            f"principal mapping rule {text!r} is neither DEFAULT nor "
            "RULE:<regex>/<replacement>/[L|U]")
    try:
        pattern = re.compile(found["pattern"].replace("\\/", "/"))
    except re.error as exc:
        raise PrincipalMappingError(f"principal mapping rule {text!r}: bad regex ({exc})"
                                    ) from None
    return _Rule(pattern, found["replacement"].replace("\\/", "/"), found["case"])


@attrs.frozen
class PrincipalMapper:
    """Maps a verified peer certificate to a principal; see the module docstring."""

    rules: tuple[_Rule, ...]

    @classmethod
    def parse(cls, rules: Sequence[str] = DEFAULT_RULES) -> PrincipalMapper:
        if not rules:
            raise PrincipalMappingError("principal mapping rules must not be empty "
                                        "(use [\"DEFAULT\"])")
        if len(rules) > MAX_RULES:
            raise PrincipalMappingError(f"at most {MAX_RULES} principal mapping rules")
        return cls(tuple(_parse_rule(rule) for rule in rules))

    def principal_of(self, auth_context: Mapping[str, Sequence[bytes]]) -> str:
        """The caller's principal from gRPC's auth context; ANONYMOUS without TLS."""
        subject = _first(auth_context, "x509_subject")
        common_name = _first(auth_context, "x509_common_name")
        alt_names = [v.decode("utf-8", "replace")
                     for v in auth_context.get("x509_subject_alternative_name", ())]
        if not subject and not common_name and not alt_names:
            return ANONYMOUS
        for rule in self.rules:
            name = rule.apply(subject, common_name, alt_names)
            if name:
                return USER_PREFIX + name
        raise PrincipalMappingError(
            f"no principal mapping rule matches the certificate subject {subject!r}")


def _first(auth_context: Mapping[str, Sequence[bytes]], key: str) -> str:
    values = auth_context.get(key, ())
    return values[0].decode("utf-8", "replace") if values else ""


def host_of(peer: str) -> str:
    """The client host of a gRPC peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return rest or peer
