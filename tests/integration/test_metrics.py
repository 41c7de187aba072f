"""Metrics as Prometheus sees them: promtool tests the chart's alert rules; a real Prometheus
scrapes the session's operator while a CustomDaemonSet's rollout is stuck; the chart's
ServiceMonitor, PodMonitor and PrometheusRule are checked against the Prometheus Operator's CRDs
by the API server."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from localcluster.binaries import (
    PROMETHEUS_OPERATOR_CRDS,
    ensure_monitoring_binaries,
    prometheus_operator_crds,
)
from localcluster.operator import free_port
from tests.helpers import REPO, Kubectl, Operator, OperatorProcess, eventually
from tests.integration.daemonsets import ALL_NODES, FLUENTD, DaemonSets, agent
from tests.integration.schedulers import SchedulerProfiles, scheduler_profile

pytestmark = [pytest.mark.cluster]

RULES = REPO / "charts" / "kubeherd" / "rules" / "kubeherd-alerts.yaml"
RULE_TESTS = REPO / "tests" / "promtool" / "kubeherd-alerts.test.yaml"
STATUS_GAUGES = {
    "status_desired_number_scheduled": "desiredNumberScheduled",
    "status_current_number_scheduled": "currentNumberScheduled",
    "status_number_misscheduled": "numberMisscheduled",
    "status_number_ready": "numberReady",
    "status_number_available": "numberAvailable",
    "status_number_unavailable": "numberUnavailable",
    "status_updated_number_scheduled": "updatedNumberScheduled",
    "status_observed_generation": "observedGeneration",
}


@pytest.fixture(scope="module")
def monitoring() -> dict[str, Path]:
    return ensure_monitoring_binaries()


def test_the_alert_rules_pass_promtool(monitoring: dict[str, Path]) -> None:
    for command in (("check", "rules", RULES), ("test", "rules", RULE_TESTS)):
        ran = subprocess.run(
            [str(monitoring["promtool"]), *map(str, command)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "SUCCESS" in ran.stdout


def test_the_operators_metrics_show_the_fluentd_example_and_a_schedulerprofile(
    operator: Operator, daemonsets: DaemonSets, schedulerprofiles: SchedulerProfiles
) -> None:
    """What `curl <operator>/metrics` shows a user, without Prometheus in between."""
    if not isinstance(operator, OperatorProcess):
        pytest.skip("the operator runs in the cluster (kind): no loopback port to read")
    namespace = daemonsets.namespace
    name = daemonsets.create(FLUENTD)
    daemonsets.wait_for_status(name, numberAvailable=len(ALL_NODES))
    schedulerprofiles.create(
        scheduler_profile("metrics", {"schedulerName": f"{namespace}-metrics"}, replicas=1)
    )
    schedulerprofiles.wait_for("metrics", "Valid", "True")

    def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    fluentd = (("customdaemonset", name), ("namespace", namespace))
    profile = (("namespace", namespace), ("schedulerprofile", "metrics"))

    def shown() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        found = scraped()
        wanted = {
            ("kubeherd_customdaemonset_status_desired_number_scheduled", fluentd): len(ALL_NODES),
            ("kubeherd_customdaemonset_status_number_available", fluentd): len(ALL_NODES),
            ("kubeherd_customdaemonset_status_number_misscheduled", fluentd): 0,
            ("kubeherd_schedulerprofile_valid", profile): 1,
            ("kubeherd_schedulerprofile_spec_replicas", profile): 1,
            ("kubeherd_active", ()): 1,
        }
        return found if all(found.get(k) == v for k, v in wanted.items()) else None

    found = eventually(shown, timeout=30, what="the example's series on /metrics")
    assert found[("kubeherd_customdaemonset_metadata_generation", fluentd)] == 1
    assert ("kubeherd_schedulerprofile_leader", profile) in found
    assert any(key[0] == "kubeherd_pass_duration_seconds_count" for key in found)


class Prometheus:
    """A real Prometheus on loopback, scraping one target every second and evaluating the
    chart's rules every second."""

    def __init__(self, binary: Path, folder: Path, target: str) -> None:
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "kubeherd", "static_configs": [{"targets": [target]}]}],
        }
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = folder / "prometheus.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    str(binary),
                    f"--config.file={folder / 'prometheus.yml'}",
                    f"--storage.tsdb.path={folder / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def api(self, path: str, **query: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=5) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=promql)["result"]
        return result

    def ready(self) -> bool:
        assert self.process.poll() is None, self.log.read_text()[-3000:]
        try:
            url = f"http://127.0.0.1:{self.port}/-/ready"
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        # Prometheus shuts down cleanly on SIGTERM; one that had to be killed fails the test.
        assert self.process.wait(timeout=30) == 0, self.log.read_text()[-3000:]


@pytest.fixture
def prometheus(
    monitoring: dict[str, Path], operator: Operator, tmp_path: Path
) -> Iterator[Prometheus]:
    if not isinstance(operator, OperatorProcess):
        pytest.skip("the operator runs in the cluster (kind): no loopback port to scrape")
    server = Prometheus(monitoring["prometheus"], tmp_path, f"127.0.0.1:{operator.metrics_port}")
    try:
        eventually(server.ready, timeout=60, what="Prometheus to be ready")
        yield server
    finally:
        server.stop()


def values(prometheus: Prometheus, promql: str) -> dict[str, float]:
    """Each series' value, by its metric name."""
    return {r["metric"]["__name__"]: float(r["value"][1]) for r in prometheus.query(promql)}


def test_prometheus_sees_a_stuck_rollout_and_its_alert(
    prometheus: Prometheus, daemonsets: DaemonSets
) -> None:
    # No node has 1000 CPUs: every pod is created and stays Pending, so the rollout never
    # makes a pod available, as with an image that never starts.
    stuck = agent("stuck")
    stuck["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1000"}}
    name = daemonsets.create(stuck)
    namespace = daemonsets.namespace
    selector = f'namespace="{namespace}",customdaemonset="{name}"'
    status = daemonsets.wait_for_status(name, numberUnavailable=2, currentNumberScheduled=2)

    def gauges_match() -> dict[str, float] | None:
        found = values(prometheus, f'{{__name__=~"kubeherd_customdaemonset_.*",{selector}}}')
        expected = {
            f"kubeherd_customdaemonset_{suffix}": float(status.get(field) or 0)
            for suffix, field in STATUS_GAUGES.items()
        }
        return found if all(found.get(k) == v for k, v in expected.items()) else None

    found = eventually(gauges_match, timeout=30, what="Prometheus to have the status as gauges")
    assert found["kubeherd_customdaemonset_metadata_generation"] == 1
    assert found["kubeherd_customdaemonset_status_number_available"] == 0

    def alert() -> list[dict[str, Any]]:
        return prometheus.query(
            f'ALERTS{{alertname="KubeherdCustomDaemonSetRolloutStuck",{selector}}}'
        )

    # `for: 15m`: the alert is pending as soon as the rule holds.
    pending = eventually(alert, timeout=30, what="the RolloutStuck alert")
    assert pending[0]["metric"]["alertstate"] == "pending"
    assert pending[0]["metric"]["severity"] == "warning"
    assert values(prometheus, "kubeherd_active") == {"kubeherd_active": 1}
    assert prometheus.query('kubeherd_api_requests_total{verb="create",code="201"} > 0')

    daemonsets.delete(name)

    # The deleted object's series go with it, and so does its alert.
    eventually(
        lambda: not prometheus.query(f"{{{selector}}}") and not alert(),
        timeout=30,
        what="the deleted CustomDaemonSet's series to go",
    )


def rendered_monitoring_objects(helm: Path) -> list[dict[str, Any]]:
    output = subprocess.run(
        [
            str(helm),
            "template",
            "kubeherd",
            str(REPO / "charts" / "kubeherd"),
            "--namespace=default",
            "--set=metrics.serviceMonitor.enabled=true",
            "--set=metrics.serviceMonitor.labels.release=prometheus",
            "--set=metrics.prometheusRule.enabled=true",
            "--set=schedulerProfiles.podMonitor.enabled=true",
            "--set=schedulerProfiles.namespaces={default}",
            "--set=schedulerProfiles.podMonitor.scrapeClass=kube-scheduler",
            "--set=schedulerProfiles.podMonitor.tokenSecret.name=scheduler-scrape-token",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return [
        document
        for document in yaml.safe_load_all(output)
        if document and document["apiVersion"].startswith("monitoring.coreos.com/")
    ]


def test_the_charts_monitoring_objects_fit_the_prometheus_operator_crds(
    kubectl: Kubectl, binaries: Any, tmp_path: Path
) -> None:
    for crd in prometheus_operator_crds():
        kubectl("apply", "--server-side", "-f", str(crd))
    try:
        for plural in PROMETHEUS_OPERATOR_CRDS:
            kubectl("wait", "--for=condition=Established", f"crd/{plural}.monitoring.coreos.com")
        objects = rendered_monitoring_objects(binaries.path("helm"))
        assert sorted(o["kind"] for o in objects) == [
            "PodMonitor",
            "PrometheusRule",
            "ServiceMonitor",
        ]

        def strict_dry_run(document: dict[str, Any]) -> subprocess.CompletedProcess[str]:
            path = tmp_path / f"{document['kind']}.yaml"
            path.write_text(yaml.safe_dump(document))
            return kubectl(
                "apply", "--dry-run=server", "--validate=strict", "-f", str(path), check=False
            )

        for document in objects:
            applied = strict_dry_run(document)
            assert applied.returncode == 0, applied.stderr
        # The check can fail: a field the CRD does not have is refused.
        monitor = next(o for o in objects if o["kind"] == "ServiceMonitor")
        monitor["spec"]["endpoints"][0]["scrapeEvery"] = "30s"
        refused = strict_dry_run(monitor)
        assert refused.returncode != 0
        assert 'unknown field "spec.endpoints[0].scrapeEvery"' in refused.stderr
    finally:
        for crd in prometheus_operator_crds():
            kubectl("delete", "--ignore-not-found", "-f", str(crd))
