#!/usr/bin/env python3
"""Produce a small tree of agent events for one run to canopy, with confluent-kafka.

    python3 producer.py --brokers 127.0.0.1:9092 --run run-py-1
    python3 producer.py --dry-run            # print the events as JSON lines, no Kafka needed

Each record: key = run id, value = one CloudEvents 1.0 JSON event (schema/events/), headers
content-type and a W3C traceparent. librdkafka's default partitioner (CRC32) would put the run in
another partition than canopy and Java clients (murmur2): partitioner=murmur2_random fixes that.
"""
import argparse, json, os, sys
from datetime import datetime, timedelta, timezone

B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base32, as ULIDs use


def ulid(at):
    """A ULID: 48 bits of Unix milliseconds, 80 random bits."""
    n = (int(at.timestamp() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    return "".join(B32[(n >> (5 * i)) & 31] for i in reversed(range(26)))


def ts(at):
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def events(run, base):
    """A conductor delegates to two workers; one finishes, the other needs input."""
    out = []

    def ev(agent, typ, after_ms, data, corr=None):
        at = base + timedelta(milliseconds=after_ms)
        e = {"specversion": "1.0", "id": ulid(at), "source": "/agents/" + agent, "type": typ, "time": ts(at),
             "runid": run, "agentid": agent, "schemaversion": 1, "sessionid": "session-1", "data": data}
        if corr:
            e["correlationid"] = corr
        out.append(e)

    later = ts(base + timedelta(hours=1))  # deadlines and leases well after the run
    ev("conductor", "tree.node_created", 0, {"role": "conductor", "capability": "orchestrate"})
    ev("conductor", "tree.node_status", 100, {"status": "running", "reason": "planning"})
    for i, cap in ((1, "research"), (2, "write")):
        w, corr = f"worker-{i}", f"task-{i}"
        ev(w, "tree.node_created", 200 + i, {"role": "worker", "parent_agent_id": "conductor", "capability": cap}, corr)
        ev(w, "tree.node_delegated", 300 + i, {"task_id": corr, "expected_by": later}, corr)
    ev("worker-1", "lease.acquired", 400, {"owner": "pool-1", "expires_at": later}, "task-1")
    ev("worker-1", "signal.progress", 500, {"fraction": 0.5}, "task-1")
    ev("worker-2", "signal.request", 600, {"request_id": "req-1", "request_kind": "clarification",
                                           "dedupe_key": "which-format"}, "task-2")
    ev("worker-1", "signal.result", 700, {"result_kind": "json", "success": True}, "task-1")
    ev("worker-1", "tree.node_completed", 800, {"result_source": "completion_event"}, "task-1")
    ev("worker-2", "tree.node_status", 900, {"status": "blocked", "reason": "waiting_for_input"}, "task-2")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", default=os.environ.get("CANOPY_BROKERS", "127.0.0.1:9092"))
    ap.add_argument("--topic", default="canopy.agent-events.v1")
    ap.add_argument("--run", default="run-py-" + ulid(datetime.now(timezone.utc)).lower())
    ap.add_argument("--base-time", help="RFC 3339 time of the first event (default: now)")
    ap.add_argument("--partitioner", default="murmur2_random", help="keep murmur2_random; see the module doc")
    ap.add_argument("--dry-run", action="store_true", help="print the events instead of producing them")
    a = ap.parse_args()
    base = datetime.fromisoformat(a.base_time.replace("Z", "+00:00")) if a.base_time else datetime.now(timezone.utc)
    evs = events(a.run, base.astimezone(timezone.utc))
    if a.dry_run:
        for e in evs:
            print(json.dumps(e, separators=(",", ":")))
        return
    from confluent_kafka import Producer  # only needed to really produce

    p = Producer({"bootstrap.servers": a.brokers, "partitioner": a.partitioner,
                  "enable.idempotence": True, "acks": "all"})
    failed = []
    trace = os.urandom(16).hex()  # one trace for the run: its wakes' spans continue it
    for e in evs:
        headers = [("content-type", b"application/cloudevents+json"),
                   ("traceparent", f"00-{trace}-{os.urandom(8).hex()}-01".encode())]
        p.produce(a.topic, key=a.run.encode(), value=json.dumps(e).encode(), headers=headers,
                  on_delivery=lambda err, msg: err and failed.append(err))
    left = p.flush(30)
    if failed or left:
        sys.exit(f"producer: {len(failed)} events failed ({failed[:1]}), {left} undelivered")
    print(f"produced {len(evs)} events of run {a.run} to {a.topic}", file=sys.stderr)


if __name__ == "__main__":
    main()
