"""The chart's alerts on series a test scraped from a real operator: `promtool test rules` with
those series, held for ten minutes, and the alerts expected to fire."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from localcluster.binaries import ensure_monitoring_binaries
from tests.helpers import REPO

RULES = REPO / "charts" / "kubeherd" / "rules" / "kubeherd-alerts.yaml"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
WATCH_FAILING = {
    "summary": "A kubeherd watch cannot list or keeps failing.",
    "description": "The {resource} watch of kubeherd at {instance} has not listed, or has kept "
    "failing, for 5 minutes: that replica is not Ready and does not reconcile CustomDaemonSets. "
    "Its /readyz and log say why.",
    "runbook": "docs/metrics.md, KubeherdWatchFailing",
}


def scrape(url: str) -> Samples:
    """Every sample of a plain-HTTP /metrics, by name and sorted labels (no proxy on the way)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def watch_failing_fires(
    found: Samples, folder: Path, resources: Sequence[str], instance: str = "scraped"
) -> subprocess.CompletedProcess[str]:
    """promtool's verdict on: the scraped watch series of one target, unchanged for ten
    minutes, fire KubeherdWatchFailing for exactly `resources` (and nothing else)."""
    series = []
    for (name, labels), value in sorted(found.items()):
        if name.startswith("kubeherd_watch_") or name == "kubeherd_ready":
            # An empty label is no label, to Prometheus.
            pairs = (("instance", instance), *labels)
            text = ",".join(f'{key}="{value}"' for key, value in pairs if value)
            series.append({"series": f"{name}{{{text}}}", "values": f"{value:g}x10"})
    expected: list[Mapping[str, Any]] = [
        {
            "exp_labels": {"severity": "critical", "instance": instance, "resource": resource},
            "exp_annotations": {
                key: text.format(resource=resource, instance=instance)
                for key, text in WATCH_FAILING.items()
            },
        }
        for resource in resources
    ]
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "10m",
                        "alertname": "KubeherdWatchFailing",
                        "exp_alerts": expected,
                    }
                ],
            }
        ],
    }
    path = folder / "scraped.test.yaml"
    path.write_text(yaml.safe_dump(test))
    promtool = ensure_monitoring_binaries()["promtool"]
    return subprocess.run(
        [str(promtool), "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
