// Produce a small tree of agent events for one run to canopy, with @canopy/agents (sdk/typescript).
//
//   npm ci && npm run --silent produce -- --brokers 127.0.0.1:9092 --run run-ts-1
//   npm run --silent dry-run     # print the events as JSON lines (--silent: no npm banner); needs no broker
//
// The package's builders make each event (schema/events), its Producer validates them, keys each
// record by run id, places it in the partition canopy keeps the run in (murmur2 of the run id) and
// sets the content type; one W3C traceparent for the run, which its wakes' spans continue.
import { randomBytes } from "crypto";
import { type Event, Producer, events, withSource } from "@canopy/agents";

const SOURCE = "/apps/canopy-example-ts"; // the source of every event: this program

// runEvents: a conductor delegates to two workers; one finishes, the other needs input.
export function runEvents(run: string, base: Date): Event[] {
  const at = (ms: number) => new Date(base.getTime() + ms);
  const env = (agentId: string, ms: number, correlationId?: string) => ({ runId: run, agentId, time: at(ms), sessionId: "session-1", correlationId });
  const later = at(3600_000); // deadlines and leases well after the run
  const out: Event[] = [
    events.treeNodeCreated({ ...env("conductor", 0), role: "conductor", capability: "orchestrate" }),
    events.treeNodeStatus({ ...env("conductor", 100), status: "running", reason: "planning" }),
  ];
  for (const [i, capability] of [[1, "research"], [2, "write"]] as const) {
    out.push(events.treeNodeCreated({ ...env(`worker-${i}`, 200 + i, `task-${i}`), role: "worker", parentAgentId: "conductor", capability }));
    out.push(events.treeNodeDelegated({ ...env(`worker-${i}`, 300 + i, `task-${i}`), taskId: `task-${i}`, expectedBy: later }));
  }
  out.push(
    events.leaseAcquired({ ...env("worker-1", 400, "task-1"), owner: "pool-1", expiresAt: later }),
    events.signalProgress({ ...env("worker-1", 500, "task-1"), fraction: 0.5 }),
    events.signalRequest({ ...env("worker-2", 600, "task-2"), requestId: "req-1", requestKind: "clarification", dedupeKey: "which-format" }),
    events.signalResult({ ...env("worker-1", 700, "task-1"), resultKind: "json", success: true }),
    events.treeNodeCompleted({ ...env("worker-1", 800, "task-1"), resultSource: "completion_event" }),
    events.treeNodeStatus({ ...env("worker-2", 900, "task-2"), status: "blocked", reason: "waiting_for_input" }),
  );
  return out;
}

async function main(argv: string[]): Promise<void> {
  const flag = (name: string, def: string) => { const i = argv.indexOf("--" + name); return i >= 0 ? argv[i + 1] : def; };
  const run = flag("run", "run-ts-" + randomBytes(8).toString("hex"));
  const topic = flag("topic", "canopy.agent-events.v1");
  const base = new Date(flag("base-time", new Date().toISOString()));
  if (isNaN(base.getTime())) throw new Error("--base-time: want an RFC 3339 time like 2026-02-14T10:00:00Z");
  const evs = runEvents(run, base);
  if (argv.includes("--dry-run")) {
    for (const e of evs) console.log(JSON.stringify(withSource(e, SOURCE))); // as the producer sends them
    return;
  }
  const prefix = topic.match(/^(.+)\.agent-events\.v1$/)?.[1];
  if (!prefix) throw new Error(`--topic ${topic}: want <prefix>.agent-events.v1`);
  const producer = new Producer(flag("brokers", "127.0.0.1:9092"), { source: SOURCE, prefix, clientId: "canopy-example-ts" });
  try {
    const trace = randomBytes(16).toString("hex"); // one trace for the run: its wakes' spans continue it
    await producer.send(evs, { traceparent: `00-${trace}-${randomBytes(8).toString("hex")}-01` });
  } finally {
    await producer.close();
  }
  console.error(`produced ${evs.length} events of run ${run} to ${topic}`);
}

main(process.argv.slice(2)).catch((err) => { console.error("producer:", err); process.exit(1); });
