"""Requests per client, from the API server's own metrics.

`apiserver_request_total` has no label for the client. API Priority and Fairness does: each
request is counted under the FlowSchema it matched. So the benchmark adds FlowSchemas that match
one client's ServiceAccount, one for writes and one for everything else, and reads the
`apiserver_flowcontrol_dispatched_requests_total` counters of those schemas. They send the client
to the priority level it gets anyway, so its requests are treated exactly as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
DISPATCHED = "apiserver_flowcontrol_dispatched_requests_total"
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Client:
    """A ServiceAccount whose requests are counted, and the priority level it normally gets."""

    label: str
    namespace: str
    service_account: str
    priority_level: str

    def schema_name(self, kind: str) -> str:
        return f"bench-{self.label}-{kind}"


# The native controller runs as this ServiceAccount (--use-service-account-credentials) and
# falls under the kube-system-service-accounts FlowSchema; kubeherd under service-accounts.
NATIVE_DAEMONSET = Client("native", "kube-system", "daemon-set-controller", "workload-high")


def kubeherd_client(namespace: str, service_account: str) -> Client:
    return Client("kubeherd", namespace, service_account, "workload-low")


def flow_schemas(client: Client, precedence: int) -> list[dict[str, Any]]:
    """Two FlowSchemas for `client`: its writes, then (one precedence later) the rest."""
    subject = {
        "kind": "ServiceAccount",
        "serviceAccount": {"name": client.service_account, "namespace": client.namespace},
    }

    def schema(kind: str, offset: int, verbs: list[str], non_resource: bool) -> dict[str, Any]:
        rule: dict[str, Any] = {
            "subjects": [subject],
            "resourceRules": [
                {
                    "verbs": verbs,
                    "apiGroups": ["*"],
                    "resources": ["*"],
                    "clusterScope": True,
                    "namespaces": ["*"],
                }
            ],
        }
        if non_resource:
            rule["nonResourceRules"] = [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
        return {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": client.schema_name(kind)},
            "spec": {
                "matchingPrecedence": precedence + offset,
                "priorityLevelConfiguration": {"name": client.priority_level},
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [rule],
            },
        }

    return [
        schema("writes", 0, list(WRITE_VERBS), non_resource=False),
        schema("reads", 1, ["*"], non_resource=True),
    ]


def samples(metrics: str, name: str) -> Iterator[tuple[dict[str, str], float]]:
    """The labels and value of each sample of the metric `name` in a /metrics text."""
    for line in metrics.splitlines():
        if not line.startswith(name + "{"):
            continue
        match = _SAMPLE.match(line)
        if match is None or match["name"] != name:
            continue
        labels = {label["key"]: label["value"] for label in _LABEL.finditer(match["labels"])}
        yield labels, float(match["value"])


def dispatched_by_schema(metrics: str) -> dict[str, float]:
    """Requests dispatched so far per FlowSchema, from the API server's /metrics text."""
    totals: dict[str, float] = {}
    for labels, value in samples(metrics, DISPATCHED):
        schema = labels.get("flow_schema", "")
        totals[schema] = totals.get(schema, 0.0) + value
    return totals


@dataclass(frozen=True)
class Requests:
    writes: int
    reads: int


def requests_between(
    client: Client, before: Mapping[str, float], after: Mapping[str, float]
) -> Requests:
    def grown(kind: str) -> int:
        name = client.schema_name(kind)
        return round(after.get(name, 0.0) - before.get(name, 0.0))

    return Requests(writes=grown("writes"), reads=grown("reads"))
