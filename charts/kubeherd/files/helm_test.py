"""`helm test`: the release's operator reconciles a CustomDaemonSet.

Creates a CustomDaemonSet whose pods fit no node, waits until the operator has observed it
(status.observedGeneration), and deletes it. Ready pods alone would not show that: the operator
must be watching and writing. Standard library only, so that it runs in the operator's image
whatever kubeherd's own client does.
"""

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
NAMESPACE = os.environ["CHECK_NAMESPACE"]
TIMEOUT = float(os.environ.get("CHECK_TIMEOUT_SECONDS", "120"))


def api_server() -> str:
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ["KUBERNETES_SERVICE_PORT"]
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def call(method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    token = (ACCOUNT / "token").read_text().strip()
    # Always https: the URL is built from the in-cluster service variables only.
    request = urllib.request.Request(  # noqa: S310
        api_server() + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "User-Agent": "kubeherd-helm-test",
        },
    )
    tls = ssl.create_default_context(cafile=ACCOUNT / "ca.crt")
    # The API server directly, as the operator reaches it: a proxy in the environment is not
    # what this checks.
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=tls)
    )
    with opener.open(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read() or b"{}")
        return answer


def unschedulable_daemonset() -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "kubeherd-helm-test"}
    return {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "CustomDaemonSet",
        "metadata": {"generateName": "kubeherd-helm-test-", "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    # No node has it: the check runs no pod.
                    "nodeSelector": {"kubeherd.io/helm-test": "no-node-has-this-label"},
                    "containers": [{"name": "idle", "image": os.environ["CHECK_IMAGE"]}],
                },
            },
        },
    }


def observed(path: str) -> dict[str, Any] | None:
    body = call("GET", path)
    status = body.get("status") or {}
    generation = body["metadata"]["generation"]
    return status if status.get("observedGeneration") == generation else None


def main() -> int:
    collection = f"/apis/kubeherd.io/v1alpha1/namespaces/{NAMESPACE}/customdaemonsets"
    try:
        created = call("POST", collection, unschedulable_daemonset())
    except urllib.error.HTTPError as refused:
        print(f"creating a CustomDaemonSet: {refused.code} {refused.read().decode()}")
        return 1
    name = created["metadata"]["name"]
    path = f"{collection}/{name}"
    print(f"created CustomDaemonSet {NAMESPACE}/{name}; waiting for the operator")
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            status = observed(path)
            if status is not None:
                print(f"the operator reconciled it: {json.dumps(status, sort_keys=True)}")
                return 0
            time.sleep(1)
        print(f"no operator observed {NAMESPACE}/{name} within {TIMEOUT:.0f}s: {call('GET', path)}")
        return 1
    finally:
        call("DELETE", path)


if __name__ == "__main__":
    sys.exit(main())
