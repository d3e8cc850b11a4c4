#!/usr/bin/env python3
"""Produce a small tree of agent events for one run to canopy, with the canopy package.

    python3 producer.py --brokers 127.0.0.1:9092 --run run-py-1
    python3 producer.py --dry-run            # print the events as JSON lines, no Kafka needed

It needs the canopy package (pip install ./sdk/python). canopy.events builds each event (every
attribute the contract wants, an id derived from its content, so a retry is a duplicate canopy
applies once); canopy.Producer validates it against the JSON Schemas, keys it by run id and
places it in the partition murmur2 of the run id gives, with the content-type header and a W3C
traceparent.
"""
import argparse
import os
import sys
from datetime import datetime, timedelta, timezone

import canopy
from canopy import events


def the_run(run, base):
    """A conductor delegates to two workers; one finishes, the other needs input."""
    def at(ms):
        return base + timedelta(milliseconds=ms)

    common = {"run_id": run, "session_id": "session-1"}
    later = base + timedelta(hours=1)  # deadlines and leases well after the run
    out = [events.tree_node_created(**common, agent_id="conductor", role="conductor", capability="orchestrate",
                                    time=at(0)),
           events.tree_node_status(**common, agent_id="conductor", status="running", reason="planning", time=at(100))]
    for i, cap in ((1, "research"), (2, "write")):
        w, corr = f"worker-{i}", f"task-{i}"
        out += [events.tree_node_created(**common, agent_id=w, role="worker", parent_agent_id="conductor", capability=cap,
                                         correlation_id=corr, time=at(200 + i)),
                events.tree_node_delegated(**common, agent_id=w, task_id=corr, expected_by=later, correlation_id=corr,
                                           time=at(300 + i))]
    out += [
        events.lease_acquired(**common, agent_id="worker-1", owner="pool-1", expires_at=later, correlation_id="task-1",
                              time=at(400)),
        events.signal_progress(**common, agent_id="worker-1", fraction=0.5, correlation_id="task-1", time=at(500)),
        events.signal_request(**common, agent_id="worker-2", request_id="req-1", request_kind="clarification",
                              dedupe_key="which-format", correlation_id="task-2", time=at(600)),
        events.signal_result(**common, agent_id="worker-1", result_kind="json", success=True, correlation_id="task-1",
                             time=at(700)),
        events.tree_node_completed(**common, agent_id="worker-1", result_source="completion_event",
                                   correlation_id="task-1", time=at(800)),
        events.tree_node_status(**common, agent_id="worker-2", status="blocked", reason="waiting_for_input",
                                correlation_id="task-2", time=at(900)),
    ]
    # Each agent is its event's source, as in the other examples.
    return [e.with_source("/agents/" + e.agent_id) for e in out]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", default=os.environ.get("CANOPY_BROKERS", "127.0.0.1:9092"))
    ap.add_argument("--topic", default="canopy.agent-events.v1")
    ap.add_argument("--run", default="run-py-" + os.urandom(6).hex())
    ap.add_argument("--base-time", help="RFC 3339 time of the first event (default: now)")
    ap.add_argument("--dry-run", action="store_true", help="print the events instead of producing them")
    a = ap.parse_args()
    base = datetime.fromisoformat(a.base_time.replace("Z", "+00:00")) if a.base_time else datetime.now(timezone.utc)
    evs = the_run(a.run, base.astimezone(timezone.utc))
    if a.dry_run:
        for e in evs:
            print(e.to_json())
        return
    trace = os.urandom(16).hex()  # one trace for the run: its wakes' spans continue it
    try:
        with canopy.Producer(a.brokers, source="/examples/producer-py") as p:
            for e in evs:
                p.send(e, topic=a.topic, traceparent=f"00-{trace}-{os.urandom(8).hex()}-01")
    except canopy.CanopyError as e:
        sys.exit(f"producer: {e}")
    print(f"produced {len(evs)} events of run {a.run} to {a.topic}", file=sys.stderr)


if __name__ == "__main__":
    main()
