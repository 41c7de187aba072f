"""Kopf settings that rest on how kubeherd's handlers are registered."""

from __future__ import annotations

import asyncio
import itertools
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import kopf
from kopf._core.reactor.running import stop_flag_checker

import kubeherd.main  # noqa: F401  (registers the handlers)
from kubeherd.settings import NoDiffBase, OperatorOptions, configure


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


def finishes(main: Callable[[], Coroutine[Any, Any, None]], options: OperatorOptions) -> bool:
    """Whether asyncio.run(main()) returns within 5 s: in a thread, so that the test can tell."""
    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    thread.join(timeout=5)
    if thread.is_alive():
        # Only a flag waited for in an executor thread keeps asyncio.run from returning: set it,
        # so that the thread ends and pytest can exit.
        options.stopping.set()
        return False
    return True


def stop_checker_after(
    options: OperatorOptions, stop: Callable[[asyncio.Future[Any]], None]
) -> Callable[[], Coroutine[Any, Any, None]]:
    """Kopf's stop-flag checker on `options.stopping`, and `stop` called while it waits (with
    the future Kopf's signal handler resolves)."""

    async def run() -> None:
        signal_flag: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        checker = asyncio.create_task(
            stop_flag_checker(signal_flag=signal_flag, stop_flag=options.stopping)
        )
        await asyncio.sleep(0.1)
        stop(signal_flag)
        await asyncio.wait_for(checker, timeout=1)

    return run


def test_after_a_signal_asyncio_run_returns_though_the_demoted_flag_is_not_set() -> None:
    """The end of kopf.run on SIGTERM or SIGINT: Kopf's stop-flag checker returns on the signal,
    and asyncio.run cancels what is left and joins its default executor. With a threading.Event
    as the stop flag, Kopf waited for it in that executor, and the join never returned."""
    options = OperatorOptions()

    # What Kopf's signal handler does.
    signalled = stop_checker_after(options, lambda flag: flag.set_result(signal.SIGTERM))

    assert finishes(signalled, options)
    assert not options.demoted.is_set()  # `kubeherd run` exits 0


def test_a_demoted_replica_stops_kopf() -> None:
    options = OperatorOptions()

    # As the peering watch does, in Kopf's loop.
    demoted = stop_checker_after(options, lambda _flag: options.demote())

    assert finishes(demoted, options)
    assert options.demoted.is_set()  # `kubeherd run` exits 1, to be restarted as a standby


def test_the_cleanup_handler_ends_kopfs_wait_on_the_stop_flag() -> None:
    """After a signal Kopf gives its waiter on the stop flag 5 s to end before it cancels it:
    kubeherd's cleanup sets the flag, so a stopped operator exits at once."""
    from kubeherd.main import Runtime, stop_operator

    options = OperatorOptions()

    asyncio.run(stop_operator(Runtime(options=options)))

    assert options.stopping.is_set()
    assert not options.demoted.is_set()


def test_kopf_retries_a_request_without_an_api_server_for_ever_waiting_at_most_30_s() -> None:
    settings = kopf.OperatorSettings()
    configure(settings)
    backoffs = settings.networking.error_backoffs
    assert not isinstance(backoffs, float | int)

    first = list(itertools.islice(backoffs, 8))
    again = list(itertools.islice(backoffs, 3))

    assert first == [1, 2, 4, 8, 16, 30, 30, 30]
    # Each request of Kopf's iterates it from the start.
    assert again == [1, 2, 4]
