"""canopy.Conductor against a real broker: pkg/wake's semantics (priority first, duplicates
dropped, staleness at receipt, an acknowledgement per wake, commit only after it). The wakes are
copies of those replay computes, written in Kafka transactions as a projector writes them."""
from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import canopy
from canopy import Conductor, Wake
from canopy._event import parse_time, ulid
from conftest import Kafka

DEADLINE = 60.0


def make_wakes(template: list[dict[str, Any]], lane: str, n: int, run: str = "run-a",
               kind: str | None = None) -> list[dict[str, Any]]:
    """n copies of the first wake of lane in template (of one with a trigger of kind, if given),
    each with a wake id of its own (a ULID, as a projector's) and run run."""
    base = next(w for w in template if w["lane"] == lane and (kind is None or any(t["kind"] == kind for t in w["triggers"])))
    out = []
    for _ in range(n):
        w = copy.deepcopy(base)
        w["wake_id"] = ulid(int(time.time() * 1000), os.urandom(10))
        w["run_id"] = run
        w["agent_tree_snapshot"]["scope"]["run_id"] = run
        out.append(w)
    return out


def records(prefix: str, wakes: list[dict[str, Any]]) -> list[tuple[str, bytes, bytes]]:
    return [(f"{prefix}.{'wakes-priority' if w['lane'] == 'priority' else 'wakes'}.v1", w["run_id"].encode(),
             json.dumps(w).encode()) for w in wakes]


def run_until(c: Conductor, handler: Callable[[Wake], None], done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not done():
        assert time.monotonic() < deadline, "the conductor did not get there in time"
        c.poll_once(handler)


def acks(kafka: Kafka, prefix: str, want: int | None = None) -> list[dict[str, Any]]:
    return [json.loads(m.value()) for m in kafka.read(f"{prefix}.agent-events.v1", want=want)]


def test_priority_backlog_first_duplicates_dropped_each_acknowledged(kafka: Kafka, replay_wakes: list[dict[str, Any]]) -> None:
    prefix = kafka.topics("cond")
    normal = make_wakes(replay_wakes, "normal", 4, kind="result")
    prio = make_wakes(replay_wakes, "priority", 2, run="run-b")
    kafka.produce_tx(records(prefix, normal + [normal[1]] + prio))  # a duplicate of the second
    got: list[Wake] = []
    with Conductor(kafka.brokers, group=prefix + "-c", prefix=prefix) as c:
        run_until(c, got.append, lambda: len(got) == 6 and c.duplicates == 1)
        assert {w.wake_id for w in got[:2]} == {w["wake_id"] for w in prio}, "the priority backlog first"
        assert [w.wake_id for w in got[2:]] == [w["wake_id"] for w in normal]
        assert c.delivered == 6
    # One acknowledgement per wake, as pkg/wake makes it.
    docs = acks(kafka, prefix, want=6)
    assert len(docs) == 6
    source = "/conductors/" + prefix + "-c"
    by_wake = {d["data"]["wake_id"]: d for d in docs}
    for w in normal + prio:
        d = by_wake[w["wake_id"]]
        canopy.validate(d)
        s = w["agent_tree_snapshot"]
        assert d["id"] == canopy.ack_id(w["wake_id"], source, 0)
        assert d["source"] == source and d["runid"] == w["run_id"] and d["agentid"] == s["root_agent_id"]
        assert d["data"]["snapshot_id"] == s["snapshot_id"]
        want = list(dict.fromkeys(t["agent_id"] for t in w["triggers"] if t["kind"] in ("result", "status_completed")))
        assert d["data"].get("agent_ids") == (want or None)
    # Everything committed, the duplicate too.
    assert sum(kafka.committed(prefix + "-c", f"{prefix}.wakes.v1").values()) >= 5
    assert sum(kafka.committed(prefix + "-c-priority", f"{prefix}.wakes-priority.v1").values()) >= 2


def test_priority_fetched_meanwhile_goes_before_the_next_normal_wake(kafka: Kafka, replay_wakes: list[dict[str, Any]]) -> None:
    prefix = kafka.topics("overtake")
    normal = make_wakes(replay_wakes, "normal", 3)
    prio = make_wakes(replay_wakes, "priority", 1, run="run-b")
    kafka.produce_tx(records(prefix, normal))
    got: list[str] = []

    def handle(w: Wake) -> None:
        got.append(w.wake_id)
        if len(got) == 1:
            kafka.produce_tx(records(prefix, prio))
            time.sleep(0.5)  # stands in for planning: the priority wake is fetched meanwhile

    with Conductor(kafka.brokers, group=prefix + "-c", prefix=prefix) as c:
        run_until(c, handle, lambda: len(got) == 4)
    assert got == [normal[0]["wake_id"], prio[0]["wake_id"], normal[1]["wake_id"], normal[2]["wake_id"]]


def test_staleness_at_receipt(kafka: Kafka, replay_wakes: list[dict[str, Any]]) -> None:
    """age_ms is the snapshot's age when generated plus the time since generated_at on the
    conductor's clock (never negative); stale is age_ms > stale_after_ms."""
    prefix = kafka.topics("stale")
    ws = make_wakes(replay_wakes, "normal", 3)
    gen = parse_time(ws[0]["agent_tree_snapshot"]["generated_at"])
    for w, age in zip(ws, (100, 200, 300)):
        w["agent_tree_snapshot"]["snapshot_age_ms"] = age
    kafka.produce_tx(records(prefix, ws))
    clock = iter([gen + timedelta(seconds=9, milliseconds=899), gen + timedelta(seconds=9, milliseconds=801),
                  gen - timedelta(seconds=5)])
    got: list[Wake] = []
    with Conductor(kafka.brokers, group=prefix + "-c", prefix=prefix, stale_after_ms=10_000, ack=False,
                   now=lambda: next(clock)) as c:
        run_until(c, got.append, lambda: len(got) == 3)
    assert [(w.age_ms, w.stale) for w in got] == [(10_000 - 1, False), (10_001, True), (300, False)]


def test_handler_error_leaves_the_wake_unacknowledged_and_uncommitted(kafka: Kafka, replay_wakes: list[dict[str, Any]]) -> None:
    prefix = kafka.topics("fail")
    [w] = make_wakes(replay_wakes, "normal", 1)
    kafka.produce_tx(records(prefix, [w]))

    def fail(_: Wake) -> None:
        raise RuntimeError("planning failed")

    with Conductor(kafka.brokers, group=prefix + "-c", prefix=prefix) as c:
        with pytest.raises(canopy.HandlerError, match="planning failed") as e:
            run_until(c, fail, lambda: False)
        assert isinstance(e.value.__cause__, RuntimeError)
    assert kafka.committed(prefix + "-c", f"{prefix}.wakes.v1") == {}
    assert acks(kafka, prefix) == []
    # The next start delivers it again.
    got: list[Wake] = []
    with Conductor(kafka.brokers, group=prefix + "-c", prefix=prefix) as c:
        run_until(c, got.append, lambda: len(got) == 1)
    assert got[0].wake_id == w["wake_id"]
    assert len(acks(kafka, prefix, want=1)) == 1


def test_commit_only_after_the_acknowledgement(kafka: Kafka, replay_wakes: list[dict[str, Any]]) -> None:
    """While the handler runs, the wake is neither acknowledged nor committed; when poll_once
    returns, both are done."""
    prefix = kafka.topics("order")
    ws = make_wakes(replay_wakes, "normal", 2)
    kafka.produce_tx(records(prefix, ws))
    seen: list[tuple[int, int]] = []

    def handle(w: Wake) -> None:
        seen.append((len(acks(kafka, prefix)), sum(kafka.committed(prefix + "-c", f"{prefix}.wakes.v1").values())))

    with Conductor(kafka.brokers, group=prefix + "-c", prefix=prefix) as c:
        run_until(c, handle, lambda: len(seen) == 2)
        assert len(acks(kafka, prefix, want=2)) == 2
    assert seen[0] == (0, 0)
    assert seen[1][0] == 1 and seen[1][1] >= 1  # the first acknowledged, then committed


def test_undecodable_records_are_skipped(kafka: Kafka, replay_wakes: list[dict[str, Any]]) -> None:
    prefix = kafka.topics("junk")
    [w] = make_wakes(replay_wakes, "normal", 1)
    kafka.produce_tx([(f"{prefix}.wakes.v1", b"run-a", b"not json"), (f"{prefix}.wakes.v1", b"run-a", b'{"wake_id": 1}')]
                     + records(prefix, [w]))
    got: list[Wake] = []
    with Conductor(kafka.brokers, group=prefix + "-c", prefix=prefix) as c:
        run_until(c, got.append, lambda: len(got) == 1)
        assert c.undecodable == 2
    assert got[0].wake_id == w["wake_id"]


def test_run_stops_on_stop(kafka: Kafka) -> None:
    prefix = kafka.topics("stop")
    c = Conductor(kafka.brokers, group=prefix + "-c", prefix=prefix)
    t = threading.Timer(1.0, c.stop)
    t.start()
    c.run(lambda w: None)
    t.join()


def test_config_problems_are_all_reported() -> None:
    with pytest.raises(canopy.ConfigError) as e:
        Conductor("nohost", group="", stale_after_ms=-1, dedupe_size=0)
    msg = str(e.value)
    for what in ("brokers", "group", "stale_after_ms", "dedupe_size"):
        assert what in msg


def test_wake_fields(replay_wakes: list[dict[str, Any]]) -> None:
    w = replay_wakes[0]
    wake = Wake(data=w, topic="t", partition=0, offset=0, received_at=datetime.now(timezone.utc), age_ms=0, stale=False,
                raw=b"")
    assert (wake.wake_id, wake.run_id, wake.lane) == (w["wake_id"], w["run_id"], w["lane"])
    assert wake.snapshot["snapshot_id"] == w["agent_tree_snapshot"]["snapshot_id"]
    assert wake.root_agent_id == w["agent_tree_snapshot"]["root_agent_id"]
