"""A daemon pod's record packs its booleans into bits of one int and its rarely set fields into
a shared PodExtras; it reads, compares, hashes and prints by its fields as read all the same."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest

from kubeherd.daemonset.core.model import NO_EXTRAS, PodInfo
from kubeherd.daemonset.shell.watches import DaemonPod

FIELDS: dict[str, Any] = {
    "name": "agent-x1",
    "uid": "uid-x1",
    "node": "n1",
    "phase": "Running",
    "ready": True,
    "ready_since": 1_000.0,
    "revision": "r1",
    "created": "2026-01-01T00:00:00Z",
    "deleting": False,
}


def daemon_pod(**changes: Any) -> DaemonPod:
    return DaemonPod.of(**{**FIELDS, "owner": "agent", **changes})


@pytest.mark.parametrize(
    ("ready", "deleting", "orphan"), list(itertools.product((False, True), repeat=3))
)
def test_each_flag_of_a_pod_reads_back_as_given(ready: bool, deleting: bool, orphan: bool) -> None:
    pod = PodInfo.of(**{**FIELDS, "ready": ready, "deleting": deleting, "orphan": orphan})

    assert (pod.ready, pod.deleting, pod.orphan) == (ready, deleting, orphan)


@pytest.mark.parametrize(
    ("in_selector", "controlled"), list(itertools.product((None, False, True), (False, True)))
)
def test_a_watched_pods_own_flags_read_back_as_given_beside_the_others(
    in_selector: bool | None, controlled: bool
) -> None:
    pod = daemon_pod(in_selector=in_selector, controlled=controlled, deleting=True)

    assert pod.in_selector is in_selector
    assert pod.controlled is controlled
    assert (pod.ready, pod.deleting, pod.orphan) == (True, True, False)


def test_every_flag_set_still_fits_in_an_int_cpython_shares() -> None:
    pod = daemon_pod(ready=True, deleting=True, orphan=True, in_selector=True, controlled=True)

    # int() of its text is the very object only for the small ints CPython keeps once.
    assert pod.flags is int(str(pod.flags))
    assert (pod.ready, pod.deleting, pod.orphan, pod.in_selector, pod.controlled) == (
        True,
        True,
        True,
        True,
        True,
    )


def test_the_rarely_set_fields_read_back_as_given() -> None:
    pod = daemon_pod(
        waiting_reason="CrashLoopBackOff", restarts=3, terminated_reason="OOMKilled", override="k"
    )

    assert (pod.waiting_reason, pod.restarts, pod.terminated_reason, pod.override) == (
        "CrashLoopBackOff",
        3,
        "OOMKilled",
        "k",
    )


def test_pods_without_rarely_set_fields_share_one_extras() -> None:
    healthy = PodInfo.from_body({"metadata": {"name": "p"}, "status": {"phase": "Running"}})

    assert daemon_pod().extras is NO_EXTRAS
    assert healthy.extras is NO_EXTRAS
    assert (healthy.waiting_reason, healthy.restarts, healthy.terminated_reason) == ("", 0, "")
    assert healthy.override == ""


def test_pods_with_the_same_rarely_set_fields_share_their_extras() -> None:
    first = daemon_pod(name="a", override="large/abc")
    second = daemon_pod(name="b", override="large/abc")

    assert first.extras is second.extras
    assert first.extras is not NO_EXTRAS


def test_records_of_the_same_fields_are_equal_and_hash_alike() -> None:
    fields: dict[str, Any] = {"in_selector": False, "controlled": True, "restarts": 2}

    assert daemon_pod(**fields) == daemon_pod(**fields)
    assert hash(daemon_pod(**fields)) == hash(daemon_pod(**fields))


@pytest.mark.parametrize(
    "change",
    [
        {"ready": False},
        {"deleting": True},
        {"orphan": True},
        {"controlled": True},
        {"in_selector": True},
        {"in_selector": False},
        {"waiting_reason": "ImagePullBackOff"},
        {"restarts": 1},
        {"terminated_reason": "Error"},
        {"override": "large/abc"},
        {"owner": "other"},
    ],
)
def test_records_differing_in_one_field_are_unequal(change: dict[str, Any]) -> None:
    assert daemon_pod(**change) != daemon_pod()


def test_a_pod_not_known_in_its_selector_differs_from_one_outside_it() -> None:
    assert daemon_pod(in_selector=None) != daemon_pod(in_selector=False)
    assert daemon_pod(in_selector=False) != daemon_pod(in_selector=True)


def test_a_record_prints_its_fields_as_read() -> None:
    text = repr(daemon_pod(in_selector=None, restarts=2))

    assert text.startswith("DaemonPod(name='agent-x1', uid='uid-x1', node='n1'")
    for shown in ("ready=True", "deleting=False", "orphan=False", "restarts=2", "override=''"):
        assert shown in text
    assert text.endswith("owner='agent', in_selector=None, controlled=False)")
    assert "flags" not in text
    assert "extras" not in text


def test_a_record_is_frozen_and_replace_refuses_its_packed_fields() -> None:
    pod = daemon_pod()

    with pytest.raises(dataclasses.FrozenInstanceError):
        pod.flags = 0  # type: ignore[misc]
    # A slotted frozen dataclass refuses a name that is not a field with a TypeError.
    with pytest.raises((AttributeError, TypeError)):
        pod.ready = False  # type: ignore[misc]
    assert pod.ready
    with pytest.raises(TypeError):
        dataclasses.replace(pod, ready=False)  # type: ignore[call-arg]
