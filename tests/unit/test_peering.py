"""Which replica works: the peering entries Kopf keeps, read as kubeherd reads them."""

from __future__ import annotations

from kubeherd.peering import live_peers, outranking, start_time_priority

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
