"""Kopf wiring for CustomDaemonSets: the handler of their watch events, which hands each one
to the controller and to the pod watch (`shell.watches`)."""

from __future__ import annotations

from typing import Any, Protocol

import kopf

from kubeherd.daemonset.controller import DaemonSetController
from kubeherd.daemonset.shell.watches import Watches
from kubeherd.names import CUSTOMDAEMONSETS, GROUP, VERSION


class Memo(Protocol):
    """What these handlers read of Kopf's memo (kubeherd.main.Runtime)."""

    @property
    def watches(self) -> Watches: ...

    @property
    def daemonsets(self) -> DaemonSetController: ...


@kopf.on.event(GROUP, VERSION, CUSTOMDAEMONSETS)
async def daemonset_event(
    namespace: str | None,
    name: str,
    type: str,
    body: kopf.Body,
    memo: Memo,
    **kwargs: Any,
) -> None:
    controller, watches = memo.daemonsets, memo.watches
    key = (namespace or "", name)
    if type == "DELETED":
        watches.forget(key)
        controller.daemonset_deleted(key)
    else:
        # Not awaited here: Kopf holds the raw body until this returns, and at start-up
        # every CustomDaemonSet's would wait for the pod listing. The controller keeps what it
        # needs of it now, and its first pass waits instead.
        # The raw dicts behind the body are replaced, never mutated, by Kopf on each event.
        controller.daemonset_changed(dict(body), ready=lambda: watches.ready(key))
