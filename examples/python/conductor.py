#!/usr/bin/env python3
"""A conductor in Python: consume canopy's wakes, priority lane first, and acknowledge each one.

    python3 conductor.py --brokers 127.0.0.1:9092 [--group my-conductor] [--print-wakes]

It needs the canopy package (pip install ./sdk/python): canopy.Conductor reads the wakes with
read_committed, takes the priority lane first, drops duplicates by wake_id, judges staleness at
receipt, sends a conductor.wake_received acknowledgement once the handler returns, and commits
the wake's offset only after Kafka has it. This file is the handler: print the wake.
"""
import argparse
import logging
import os
import signal
import sys
import time

import canopy


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", default=os.environ.get("CANOPY_BROKERS", "127.0.0.1:9092"))
    ap.add_argument("--prefix", default="canopy")
    ap.add_argument("--group", default="canopy-conductor-py")
    ap.add_argument("--stale-after-ms", type=int, default=10_000)
    ap.add_argument("--print-wakes", action="store_true", help="print each wake's JSON instead of a summary")
    ap.add_argument("--work-ms", type=int, default=0, help="time each wake's handling takes (stands in for planning)")
    a = ap.parse_args()
    # One conductor.wake.received JSON line per wake on stderr: metadata only, never node contents.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")

    def handle(w: canopy.Wake) -> None:
        if a.print_wakes:
            print(w.raw.decode(), flush=True)
        else:
            s = w.snapshot
            part = f" part={w.part['number']}/{w.part['count']}" if w.part else ""
            kinds = " ".join(f"{t['kind']}:{t['agent_id']}" for t in w.triggers)
            print(f"{'WAKE!' if w.lane == 'priority' else 'wake '} {w.run_id} seq={s['as_of_event_seq']}{part} "
                  f"[{kinds}] nodes={s['summary']['node_count_included']}/{s['summary']['node_count_total']}", flush=True)
        time.sleep(a.work_ms / 1000)  # ... a real conductor plans and delegates here

    c = canopy.Conductor(a.brokers, group=a.group, prefix=a.prefix, stale_after_ms=a.stale_after_ms)
    # SIGTERM or Ctrl-C: finish the wake in hand (acknowledged and committed), then leave the groups.
    signal.signal(signal.SIGTERM, lambda *_: c.stop())
    signal.signal(signal.SIGINT, lambda *_: c.stop())
    try:
        c.run(handle)
    except canopy.CanopyError as e:
        sys.exit(f"conductor: {e}")


if __name__ == "__main__":
    main()
