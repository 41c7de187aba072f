"""Kopf settings that rest on how kubeherd's handlers are registered."""

from __future__ import annotations

import kopf

import kubeherd.main  # noqa: F401  (registers the handlers)
from kubeherd.settings import NoDiffBase


def test_no_change_handlers_so_the_skipped_diff_base_is_never_needed() -> None:
    """NoDiffBase skips what only change handlers (on.create, on.update, on.field ...) use. If
    one is ever added, this fails: it would need the real diff base back."""
    registry = kopf.get_default_registry()
    # Kopf has no public listing of registered handlers per kind of cause.
    assert registry._watching.get_all_handlers(), "the event handlers should be registered"
    assert not registry._changing.get_all_handlers()


def test_no_diff_base_builds_an_empty_essence() -> None:
    storage = NoDiffBase(prefix="kubeherd.io", key="last-handled-configuration", v1=False)
    body = kopf.Body({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}})
    assert storage.build(body=body) == {}
