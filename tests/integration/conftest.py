"""Fixtures of the CustomDaemonSet tests."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.integration.daemonsets import DaemonSets


@pytest.fixture(scope="session")
def custom_api(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def daemonsets(
    custom_api: client.CustomObjectsApi,
    core_v1: client.CoreV1Api,
    apps_v1: client.AppsV1Api,
    namespace: str,
) -> DaemonSets:
    return DaemonSets(custom_api, core_v1, apps_v1, namespace)
