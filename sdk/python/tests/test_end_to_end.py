"""The package end to end, with the Go test's projector: a run sent with the Producer raises
wakes, which the Conductor receives and acknowledges. The Go test then checks that the projector
applied every event and every acknowledgement of the run (results/e2e.json)."""
from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone

import canopy
from canopy import Wake, events

RUN = "run-sdk-e2e"


def the_run(now: datetime) -> list[canopy.Event]:
    """A conductor delegates to two workers; one finishes, the other asks and blocks."""
    later = now + timedelta(hours=1)

    def at(ms: int) -> datetime:
        return now + timedelta(milliseconds=ms)

    out = [events.tree_node_created(run_id=RUN, agent_id="conductor", role="conductor", time=at(0)),
           events.tree_node_status(run_id=RUN, agent_id="conductor", status="running", time=at(1))]
    for i in (1, 2):
        out += [events.tree_node_created(run_id=RUN, agent_id=f"worker-{i}", role="worker", parent_agent_id="conductor",
                                         correlation_id=f"task-{i}", time=at(10 + i)),
                events.tree_node_delegated(run_id=RUN, agent_id=f"worker-{i}", task_id=f"task-{i}", expected_by=later,
                                           correlation_id=f"task-{i}", time=at(20 + i))]
    out += [events.lease_acquired(run_id=RUN, agent_id="worker-1", owner="pool-1", expires_at=later, time=at(30)),
            events.signal_progress(run_id=RUN, agent_id="worker-1", fraction=0.5, time=at(40)),
            events.signal_request(run_id=RUN, agent_id="worker-2", request_id="req-1", request_kind="clarification", time=at(50)),
            events.signal_result(run_id=RUN, agent_id="worker-1", result_kind="json", success=True, time=at(60)),
            events.tree_node_completed(run_id=RUN, agent_id="worker-1", result_source="completion_event", time=at(70)),
            events.tree_node_status(run_id=RUN, agent_id="worker-2", status="blocked", reason="waiting_for_input", time=at(80))]
    return out


def test_produce_project_conduct(prefix: str, kafka: object, results: str) -> None:
    brokers = os.environ["CANOPY_BROKERS"]
    evs = the_run(datetime.now(timezone.utc))
    with canopy.Producer(brokers, source="/tests/e2e", prefix=prefix) as p:
        for ev in evs:
            p.send(ev)
    kinds: set[str] = set()
    wakes: list[Wake] = []

    def handle(w: Wake) -> None:
        if w.run_id == RUN:
            wakes.append(w)
            kinds.update(t["kind"] for t in w.triggers)

    deadline = time.monotonic() + 90
    with canopy.Conductor(brokers, group=prefix + "-e2e", prefix=prefix) as c:
        while not {"request", "result", "status_completed", "status_blocked"} <= kinds:
            assert time.monotonic() < deadline, f"wakes of {RUN} with triggers {sorted(kinds)} only"
            c.poll_once(handle)
    assert all(w.root_agent_id == "conductor" and not w.stale for w in wakes)
    with open(os.path.join(results, "e2e.json"), "w", encoding="utf-8") as f:
        json.dump({"run": RUN, "events": len(evs), "wakes": [w.wake_id for w in wakes]}, f)
