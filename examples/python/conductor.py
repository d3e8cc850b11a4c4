#!/usr/bin/env python3
"""A conductor in Python: consume canopy's wakes, priority lane first, and acknowledge each one.

    python3 conductor.py --brokers 127.0.0.1:9092 [--group my-conductor] [--print-wakes]

Wakes are committed in Kafka transactions: read them with isolation.level=read_committed. Each
wake is handled once: duplicates (same wake_id) are dropped. Staleness is recomputed at receipt.
After handling a wake, a conductor.wake_received event goes to the agent-events topic (key = run
id, murmur2_random like every producer) so canopy's delivery watchdog marks the results the wake
delivered as forwarded; only then is the wake's offset committed.
"""
import argparse, hashlib, json, os, signal, sys, time
from collections import OrderedDict
from datetime import datetime, timezone
from confluent_kafka import Consumer, Producer

B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ack_id(wake_id, source):
    """The ack's ULID: the wake's time, entropy from (source, wake id), so a re-ack is a duplicate."""
    ms = 0
    for c in wake_id[:10]:
        ms = ms * 32 + B32.index(c)
    seed = hashlib.sha256(f"conductor.wake_received\0{source}\0{wake_id}".encode()).digest()[:10]
    n = (ms << 80) | int.from_bytes(seed, "big")
    return "".join(B32[(n >> (5 * i)) & 31] for i in reversed(range(26)))


def parse_ms(s):
    return int(datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() * 1000)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", default=os.environ.get("CANOPY_BROKERS", "127.0.0.1:9092"))
    ap.add_argument("--prefix", default="canopy")
    ap.add_argument("--group", default="canopy-conductor-py")
    ap.add_argument("--stale-after-ms", type=int, default=10_000)
    ap.add_argument("--print-wakes", action="store_true", help="print each wake's JSON instead of a summary")
    ap.add_argument("--work-ms", type=int, default=0, help="time each wake's handling takes (stands in for planning)")
    a = ap.parse_args()
    source = "/conductors/" + a.group
    common = {"bootstrap.servers": a.brokers, "group.id": a.group, "isolation.level": "read_committed",
              "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    # One consumer per lane, so the priority lane can be polled without waiting before every normal wake.
    prio = Consumer(dict(common, **{"group.id": a.group + "-priority"}))
    normal = Consumer(common)
    assigned = []
    prio.subscribe([f"{a.prefix}.wakes-priority.v1"], on_assign=lambda c, parts: assigned.append(parts))
    normal.subscribe([f"{a.prefix}.wakes.v1"])
    acks = Producer({"bootstrap.servers": a.brokers, "partitioner": "murmur2_random", "enable.idempotence": True})
    seen = OrderedDict()  # the last 10,000 wake ids

    def handle(consumer, msg):
        if msg.error():
            print(f"conductor: {msg.error()}", file=sys.stderr)
            return
        w = json.loads(msg.value())
        if w["wake_id"] not in seen:
            seen[w["wake_id"]] = True
            if len(seen) > 10_000:
                seen.popitem(last=False)
            s, now = w["agent_tree_snapshot"], int(time.time() * 1000)
            age = s["snapshot_age_ms"] + max(0, now - parse_ms(s["generated_at"]))
            log = {"event": "conductor.wake.received", "wake_id": w["wake_id"], "run_id": w["run_id"], "lane": w["lane"],
                   "snapshot_id": s["snapshot_id"], "as_of_event_seq": s["as_of_event_seq"], "topic": msg.topic(),
                   "partition": msg.partition(), "offset": msg.offset(), "nodes_included": len(s["nodes"]),
                   "nodes_omitted": s["truncation_meta"]["omitted_count_total"], "truncated": s["truncated"],
                   "stale": age > a.stale_after_ms, "age_ms": age, "bytes": len(msg.value())}
            # A run's triggers that do not fit one wake come as consecutive parts, each a wake:
            # part = {"number": n, "count": c}, absent when the wake was not split.
            part = f" part={w['part']['number']}/{w['part']['count']}" if w.get("part") else ""
            if part:
                log.update(part=w["part"]["number"], parts=w["part"]["count"])
            print(json.dumps(log), file=sys.stderr)  # metadata only, never node contents
            if a.print_wakes:
                print(msg.value().decode(), flush=True)
            else:
                kinds = " ".join(f"{t['kind']}:{t['agent_id']}" for t in w["triggers"])
                print(f"{'WAKE!' if w['lane'] == 'priority' else 'wake '} {w['run_id']} seq={s['as_of_event_seq']}{part} "
                      f"[{kinds}] nodes={s['summary']['node_count_included']}/{s['summary']['node_count_total']}", flush=True)
            # ... a real conductor plans and delegates here, then acknowledges:
            time.sleep(a.work_ms / 1000)
            agents = list(dict.fromkeys(t["agent_id"] for t in w["triggers"] if t["kind"] in ("result", "status_completed")))
            ack = {"specversion": "1.0", "id": ack_id(w["wake_id"], source), "source": source,
                   "type": "conductor.wake_received", "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                   "runid": w["run_id"], "agentid": s["root_agent_id"] or "conductor", "schemaversion": 1,
                   "data": {"wake_id": w["wake_id"], "snapshot_id": s["snapshot_id"], **({"agent_ids": agents} if agents else {})}}
            acks.produce(f"{a.prefix}.agent-events.v1", key=w["run_id"].encode(), value=json.dumps(ack).encode(),
                         headers=[("content-type", b"application/cloudevents+json")])
            if acks.flush(30):
                sys.exit(f"conductor: acknowledgement of wake {w['wake_id']} not delivered")
        consumer.commit(message=msg, asynchronous=False)

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop cleanly: leave the groups
    try:
        while not assigned:  # join the priority lane's group before taking any normal wake
            m = prio.poll(0.1)
            if m is not None:
                handle(prio, m)
        timeout = 1.0  # the priority backlog at start: until the lane is quiet for a second
        while (m := prio.poll(timeout)) is not None:
            handle(prio, m)
        while True:
            while (m := prio.poll(0)) is not None:  # pending priority wakes first, always
                handle(prio, m)
            m = normal.poll(0.1)
            if m is not None:
                handle(normal, m)
    except KeyboardInterrupt:
        pass
    finally:
        prio.close()
        normal.close()


if __name__ == "__main__":
    main()
