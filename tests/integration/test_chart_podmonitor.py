"""The chart's PodMonitor for the SchedulerProfiles' kube-scheduler pods (security review F7):
it sends a bearer token to every pod it selects, so it selects only kubeherd's scheduler pods in
the namespaces named, and the chart makes a token that never expires only when asked to."""

from __future__ import annotations

from typing import Any

import pytest

from kubeherd.daemonset.core.claims import selector_matches
from kubeherd.scheduler.core.objects import deployment
from kubeherd.scheduler.core.owner import Owner
from localcluster.binaries import Binaries
from tests.integration.test_chart import CHART, helm, render_chart

pytestmark = [pytest.mark.cluster]

ENABLED = "--set=schedulerProfiles.podMonitor.enabled=true"
IN_TEAM_NAMESPACES = "--set=schedulerProfiles.namespaces={team-a,team-b}"
SCRAPE_CLASS = "--set=schedulerProfiles.podMonitor.scrapeClass=kube-scheduler"


def monitoring_objects(binaries: Binaries, *values: str) -> dict[str, dict[str, Any]]:
    """The objects the PodMonitor brings, by kind."""
    documents = render_chart(binaries, ENABLED, *values)
    return {
        d["kind"]: d for d in documents if d["metadata"]["name"] == "kh-kubeherd-scheduler-metrics"
    } | {d["kind"]: d for d in documents if d["kind"] == "Secret"}


def refusal(binaries: Binaries, *values: str) -> str:
    rendered = helm(
        binaries, "template", "kh", str(CHART), "-n", "ops", ENABLED, *values, check=False
    )
    assert rendered.returncode != 0
    return rendered.stderr


def test_it_selects_only_kubeherds_scheduler_pods_in_the_schedulerprofile_namespaces(
    binaries: Binaries,
) -> None:
    spec = monitoring_objects(binaries, IN_TEAM_NAMESPACES, SCRAPE_CLASS)["PodMonitor"]["spec"]

    assert spec["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    owner = Owner("fast", "team-a", "uid-1")
    scheduler_pod = deployment({}, owner, image="img", config_hash="abc")["spec"]["template"]
    assert selector_matches(spec["selector"], scheduler_pod["metadata"]["labels"])
    # Another tool's kube-scheduler with the common labels, in the same namespace: not sent
    # the token.
    lookalike = {"app.kubernetes.io/name": "kube-scheduler", "app.kubernetes.io/instance": "x"}
    assert not selector_matches(spec["selector"], lookalike)
    # Its own list of namespaces wins over the SchedulerProfiles'.
    narrowed = monitoring_objects(
        binaries,
        IN_TEAM_NAMESPACES,
        SCRAPE_CLASS,
        "--set=schedulerProfiles.podMonitor.namespaces={team-a}",
    )["PodMonitor"]["spec"]
    assert narrowed["namespaceSelector"] == {"matchNames": ["team-a"]}


def test_without_namespaces_it_is_refused_rather_than_scraping_every_namespace(
    binaries: Binaries,
) -> None:
    assert "name the namespaces whose scheduler pods it scrapes" in refusal(binaries, SCRAPE_CLASS)


def test_the_chart_makes_a_token_that_never_expires_only_when_asked(
    binaries: Binaries,
) -> None:
    # Prometheus' own token, through its scrape class: no Secret, no credentials here.
    with_class = monitoring_objects(binaries, IN_TEAM_NAMESPACES, SCRAPE_CLASS)
    assert "Secret" not in with_class
    assert with_class["PodMonitor"]["spec"]["scrapeClass"] == "kube-scheduler"
    (endpoint,) = with_class["PodMonitor"]["spec"]["podMetricsEndpoints"]
    assert "authorization" not in endpoint
    # A token the user keeps.
    kept = monitoring_objects(
        binaries,
        IN_TEAM_NAMESPACES,
        "--set=schedulerProfiles.podMonitor.tokenSecret.name=scheduler-scrape-token",
    )
    assert "Secret" not in kept
    (endpoint,) = kept["PodMonitor"]["spec"]["podMetricsEndpoints"]
    assert endpoint["authorization"]["credentials"] == {
        "name": "scheduler-scrape-token",
        "key": "token",
    }
    # The legacy token, asked for by name.
    legacy = monitoring_objects(
        binaries, IN_TEAM_NAMESPACES, "--set=schedulerProfiles.podMonitor.legacyToken=true"
    )
    assert legacy["Secret"]["type"] == "kubernetes.io/service-account-token"
    (endpoint,) = legacy["PodMonitor"]["spec"]["podMetricsEndpoints"]
    assert endpoint["authorization"]["credentials"]["name"] == legacy["Secret"]["metadata"]["name"]
    # Nothing said: refused, with the choices.
    assert "say how Prometheus authenticates" in refusal(binaries, IN_TEAM_NAMESPACES)


def test_the_scrape_identity_may_read_metrics_and_nothing_else(binaries: Binaries) -> None:
    objects = monitoring_objects(
        binaries,
        IN_TEAM_NAMESPACES,
        SCRAPE_CLASS,
        "--set=schedulerProfiles.podMonitor.readers[0].name=prometheus-k8s",
        "--set=schedulerProfiles.podMonitor.readers[0].namespace=monitoring",
    )

    assert objects["ClusterRole"]["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    subjects = {(s["name"], s["namespace"]) for s in objects["ClusterRoleBinding"]["subjects"]}
    assert subjects == {("kh-kubeherd-scheduler-metrics", "ops"), ("prometheus-k8s", "monitoring")}
