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
