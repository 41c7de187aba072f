"""Which replica works: the peering entries Kopf keeps, read as kubeherd reads them."""

from __future__ import annotations

import os
import pwd
import re
import socket
from typing import NoReturn

import pytest
from kopf._core.engines.peering import detect_own_id

from kubeherd.kopf_adapter import live_peers
from kubeherd.peering import outranking, own_identity, start_time_priority

NOW = 1_795_000_000.0  # 2026-11-18T11:06:40Z


def entry(priority: int, lastseen: str, lifetime: int = 60) -> dict[str, object]:
    return {"priority": priority, "lifetime": lifetime, "lastseen": lastseen}


def test_an_older_replica_ranks_higher_and_ties_are_broken_by_the_low_digits() -> None:
    older = start_time_priority(NOW, tie_breaker=999)
    newer = start_time_priority(NOW + 0.001, tie_breaker=0)
    same_millisecond = start_time_priority(NOW, tie_breaker=998)

    assert older > newer
    assert same_millisecond > older
    assert abs(older) < 2**53  # exact in JSON, as the API server stores it


def test_only_entries_within_their_lifetime_are_live() -> None:
    body = {
        "status": {
            "renewed": entry(5, "2026-11-18T11:06:30.5+00:00"),  # 10 s before NOW
            "expired": entry(9, "2026-11-18T11:04:00+00:00"),  # 160 s before NOW
            "short-lived": entry(7, "2026-11-18T11:06:30+00:00", lifetime=5),
            "removed": None,  # Kopf nulls an entry on a clean exit
        }
    }

    assert [peer.identity for peer in live_peers(body, NOW)] == ["renewed"]
    assert live_peers(None, NOW) == []
    assert live_peers({"metadata": {"name": "kubeherd"}}, NOW) == []


def test_a_replica_is_outranked_only_by_higher_priorities() -> None:
    body = {
        "status": {
            "me": entry(-200, "2026-11-18T11:06:39+00:00"),
            "younger": entry(-300, "2026-11-18T11:06:39+00:00"),
            "oldest": entry(-100, "2026-11-18T11:06:39+00:00"),
            "older": entry(-150, "2026-11-18T11:06:39+00:00"),
        }
    }
    peers = live_peers(body, NOW)

    assert [peer.identity for peer in outranking(peers, -200)] == ["oldest", "older"]
    assert outranking(peers, -100) == []


def test_the_identity_is_the_pods_name_when_the_chart_sets_pod_id() -> None:
    assert own_identity({"POD_ID": "kubeherd-7d9c5b-x2x4q"}) == "kubeherd-7d9c5b-x2x4q"


def test_without_a_passwd_entry_the_identity_names_the_uid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As in the image: uid 65532 has no passwd entry, and no USER or LOGNAME names it."""

    def getpwuid(uid: int) -> NoReturn:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", getpwuid)
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME", "POD_ID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(KeyError, match="uid not found"):
        detect_own_id(manual=False)  # Kopf's default: what crashed the operator

    identity = own_identity({"POD_ID": ""})

    host = re.escape(socket.gethostname())
    assert re.fullmatch(rf"uid-{os.getuid()}@{host}/\d{{14}}/[0-9a-f]{{4}}", identity)


def test_outside_a_pod_the_identity_names_the_user_host_and_start() -> None:
    identity = own_identity({})

    user, rest = identity.split("@", 1)
    assert user
    assert rest.startswith(f"{socket.gethostname()}/")
