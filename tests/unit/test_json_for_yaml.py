"""Revisions are sent as YAML (so the API server stores their canonical form): the JSON sent
must read back as the same data in any script."""

from __future__ import annotations

import pytest
import yaml

from kubeherd.kube.wire import json_for_yaml


@pytest.mark.parametrize(
    "text",
    [
        "plain",
        "héllo, 世界",
        "🚀 beyond the Basic Multilingual Plane 🛰️",
        "a backslash before an emoji: \\🚀",
        "an escape spelt out: \\ud83d\\ude80",
        'quotes " and control \t\n\x00\x85 characters',
        "\U0010ffff",
    ],
)
def test_yaml_reads_the_same_data(text: str) -> None:
    body = {"data": {"value": text, "list": [text, 1, True, None]}}
    encoded = json_for_yaml(body)
    assert encoded.isascii()
    assert yaml.safe_load(encoded) == body
