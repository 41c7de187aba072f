"""The syntax of Kubernetes names, as apimachinery's validation checks it: what the API server
would refuse, checked where kubeherd builds paths or queries out of such names (a name that is
not one could climb out of a directory, or say more than it seems to).

Each pattern is anchored so that it reads the same with Python's fullmatch, JSON Schema's
`pattern` and CEL's `matches`, which look for a match anywhere in the text; and it has no
backslash, which a CEL string literal would read as an escape.
"""

from __future__ import annotations

import re

DNS_LABEL_LENGTH = 63
DNS_SUBDOMAIN_LENGTH = 253
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def is_dns_label(text: str) -> bool:
    """A namespace's or a Service's name: lower case, digits and '-', at most 63."""
    return len(text) <= DNS_LABEL_LENGTH and re.fullmatch(DNS_LABEL, text) is not None


def is_dns_subdomain(text: str) -> bool:
    """Most objects' names: DNS labels joined by '.', at most 253."""
    return len(text) <= DNS_SUBDOMAIN_LENGTH and re.fullmatch(DNS_SUBDOMAIN, text) is not None


# Label keys and values (IsQualifiedName, IsValidLabelValue). The name part's length is in the
# pattern itself, so one anchored match settles it.
LABEL_NAME_LENGTH = 63
LABEL_VALUE_LENGTH = 63
LABEL_KEY_LENGTH = DNS_SUBDOMAIN_LENGTH + 1 + LABEL_NAME_LENGTH
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = rf"^({DNS_SUBDOMAIN[1:-1]}/)?{_LABEL_NAME}$"
LABEL_VALUE = rf"^({_LABEL_NAME})?$"
# The one bound the key pattern leaves open: a prefix longer than a DNS subdomain may be.
_LONG_PREFIX = rf"^[^/]{{{DNS_SUBDOMAIN_LENGTH + 1},}}/"
LABEL_KEY_TEXT = (
    "an optional DNS subdomain prefix of at most 253 characters and '/', then a name of at "
    "most 63 characters: letters, digits, '-', '_' or '.', starting and ending with a letter or "
    "digit"
)
LABEL_VALUE_TEXT = (
    "empty, or at most 63 characters: letters, digits, '-', '_' or '.', starting and ending "
    "with a letter or digit"
)


def is_label_key(text: str) -> bool:
    return re.fullmatch(LABEL_KEY, text) is not None and re.match(_LONG_PREFIX, text) is None


def is_label_value(text: str) -> bool:
    return re.fullmatch(LABEL_VALUE, text) is not None


def label_key_rule(variable: str) -> str:
    """A CEL expression true when `variable` is a label key. Its cost grows with the string's
    length: keep the string's maxLength (or the map's) bounded where it is used."""
    return f"{variable}.matches('{LABEL_KEY}') && !{variable}.matches('{_LONG_PREFIX}')"
