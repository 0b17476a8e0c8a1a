"""Regexes (over the JSON text inside the quotes) for the string formats the compiler enforces.

Each accepts a subset of what the format's RFC allows and of what ``jsonschema``'s format checker
accepts (``date.fromisoformat``, ``ipaddress``, ``uuid.UUID``), so an accepted string is valid under
both. Deliberate narrowings: no leap seconds, hostnames of at most 4 labels of at most 62 characters,
IPv6 without zone ids, e-mail local parts without quoting, URIs with a registered-name or IPv4 host.
IRIs are limited to URIs (ASCII). ``byte`` is OpenAPI's base64. All are ASCII without characters that
JSON escapes, so the text equals the decoded string.
"""

from __future__ import annotations

__all__ = ["CHECKED_ELSEWHERE", "FORMATS", "enforced_format", "format_width"]

_D2 = "[0-9]{2}"
_YEAR = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"  # 0001..9999 (Python has no year 0)
_LEAP = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MD = (
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
DATE = f"(?:{_YEAR}-{_MD}|{_LEAP}-02-29)"
_OFFSET = "(?:[zZ]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
TIME = f"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?{_OFFSET}"
DATE_TIME = f"{DATE}[tT]{TIME}"
_N = "[0-9]+"
_DUR_TIME = f"T(?:{_N}H(?:{_N}M(?:{_N}S)?)?|{_N}M(?:{_N}S)?|{_N}S)"
_DUR_DATE = f"(?:{_N}D|{_N}M(?:{_N}D)?|{_N}Y(?:{_N}M(?:{_N}D)?)?)(?:{_DUR_TIME})?"
DURATION = f"P(?:{_DUR_DATE}|{_DUR_TIME}|{_N}W)"
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?"
HOSTNAME = f"{_LABEL}(?:\\.{_LABEL}){{0,3}}"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
IPV4 = f"{_OCTET}(?:\\.{_OCTET}){{3}}"
_H = "[0-9a-fA-F]{1,4}"
_LS32 = f"(?:{_H}:{_H}|{IPV4})"
IPV6 = (
    "(?:"
    f"(?:{_H}:){{6}}{_LS32}"
    f"|::(?:{_H}:){{5}}{_LS32}"
    f"|(?:{_H})?::(?:{_H}:){{4}}{_LS32}"
    f"|(?:(?:{_H}:){{0,1}}{_H})?::(?:{_H}:){{3}}{_LS32}"
    f"|(?:(?:{_H}:){{0,2}}{_H})?::(?:{_H}:){{2}}{_LS32}"
    f"|(?:(?:{_H}:){{0,3}}{_H})?::{_H}:{_LS32}"
    f"|(?:(?:{_H}:){{0,4}}{_H})?::{_LS32}"
    f"|(?:(?:{_H}:){{0,5}}{_H})?::{_H}"
    f"|(?:(?:{_H}:){{0,6}}{_H})?::"
    ")"
)
UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_ATOM = "[A-Za-z0-9!#$%&'*+=?^_`{|}~-]+"
EMAIL = f"{_ATOM}(?:\\.{_ATOM})*@{HOSTNAME}"
_PCT = "%[0-9a-fA-F]{2}"
_PCHAR = f"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|{_PCT})"
_REG = f"(?:[A-Za-z0-9._~!$&'()*+,;=-]|{_PCT})*"
_USER = f"(?:[A-Za-z0-9._~!$&'()*+,;=:-]|{_PCT})*"
_AUTH = f"(?:{_USER}@)?(?:{IPV4}|{_REG})(?::[0-9]*)?"
_QF = f"(?:{_PCHAR}|[/?])*"
URI = (
    f"[A-Za-z][A-Za-z0-9+.-]*:(?://{_AUTH}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?"
    f"|{_PCHAR}+(?:/{_PCHAR}*)*)?(?:\\?{_QF})?(?:#{_QF})?"
)

_SEG_NC = f"(?:[A-Za-z0-9._~!$&'()*+,;=@-]|{_PCT})+"
_RELATIVE = (
    f"(?://{_AUTH}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_SEG_NC}(?:/{_PCHAR}*)*)?"
    f"(?:\\?{_QF})?(?:#{_QF})?"
)
URI_REFERENCE = f"(?:{URI}|{_RELATIVE})"

FORMATS: dict[str, str] = {
    "date-time": DATE_TIME,
    "date": DATE,
    "time": TIME,
    "duration": DURATION,
    "email": EMAIL,
    "hostname": HOSTNAME,
    "ipv4": IPV4,
    "ipv6": IPV6,
    "uuid": UUID,
    "uri": URI,
    "uri-reference": URI_REFERENCE,
    "iri": URI,
    "iri-reference": URI_REFERENCE,
}


def format_width(name: str) -> tuple[int, int | None]:
    """(min, max) length in characters of the strings a format regex accepts (max None: unbounded)."""
    from ...automata.sre import parse

    lo, hi = parse(FORMATS[name]).getwidth()
    return lo, (None if hi >= 2**31 - 1 or hi >= 65535 else hi)


# Every format name ``jsonschema`` can check for some draft (some only with an optional package).
# A format outside this set and outside FORMATS is one ``jsonschema`` never checks: it is an
# annotation there, so it is one here too (no string is excluded by it).
CHECKED_ELSEWHERE = frozenset({
    "color", "date", "date-time", "duration", "email", "host-name", "hostname", "idn-email",
    "idn-hostname", "ip-address", "ipv4", "ipv6", "iri", "iri-reference", "json-pointer", "regex",
    "relative-json-pointer", "time", "uri", "uri-reference", "uri-template", "uuid",
})


def enforced_format(s: dict[str, object]) -> object:
    """The node's ``format`` if it constrains strings (None when absent or unknown to ``jsonschema``)."""
    fmt = s.get("format")
    if isinstance(fmt, str) and fmt not in FORMATS and fmt not in CHECKED_ELSEWHERE:
        return None
    return fmt
