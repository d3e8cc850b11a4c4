// Produce a small tree of agent events for one run to canopy with kafkajs.
//
//   npm ci && npm run --silent produce -- --brokers 127.0.0.1:9092 --run run-ts-1
//   npm run --silent dry-run     # print the events as JSON lines (--silent: no npm banner); needs no broker
//
// Each record: key = run id, value = one CloudEvents 1.0 JSON event (schema/events/), headers
// content-type and a W3C traceparent. kafkajs's DefaultPartitioner is murmur2 like Kafka's Java
// client and canopy, so a run's records land in its partition (librdkafka clients must set
// partitioner=murmur2_random instead).
import { randomBytes } from "crypto";

const B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"; // Crockford's base32, as ULIDs use

// ulid is 48 bits of Unix milliseconds and 80 random bits.
function ulid(at: Date): string {
  let n = (BigInt(at.getTime()) << 80n) | BigInt("0x" + randomBytes(10).toString("hex"));
  let s = "";
  for (let i = 0; i < 26; i++, n >>= 5n) s = B32[Number(n & 31n)] + s;
  return s;
}

type Event = {
  specversion: "1.0"; id: string; source: string; type: string; time: string; runid: string;
  agentid: string; schemaversion: 1; sessionid?: string; correlationid?: string; data: Record<string, unknown>;
};

// events: a conductor delegates to two workers; one finishes, the other needs input.
export function events(run: string, base: Date): Event[] {
  const out: Event[] = [];
  const ev = (agent: string, type: string, afterMs: number, data: Record<string, unknown>, corr?: string) => {
    const at = new Date(base.getTime() + afterMs);
    out.push({ specversion: "1.0", id: ulid(at), source: "/agents/" + agent, type, time: at.toISOString(), runid: run,
      agentid: agent, schemaversion: 1, sessionid: "session-1", ...(corr ? { correlationid: corr } : {}), data });
  };
  const later = new Date(base.getTime() + 3600_000).toISOString(); // deadlines and leases well after the run
  ev("conductor", "tree.node_created", 0, { role: "conductor", capability: "orchestrate" });
  ev("conductor", "tree.node_status", 100, { status: "running", reason: "planning" });
  for (const [i, capability] of [[1, "research"], [2, "write"]] as const) {
    ev(`worker-${i}`, "tree.node_created", 200 + i, { role: "worker", parent_agent_id: "conductor", capability }, `task-${i}`);
    ev(`worker-${i}`, "tree.node_delegated", 300 + i, { task_id: `task-${i}`, expected_by: later }, `task-${i}`);
  }
  ev("worker-1", "lease.acquired", 400, { owner: "pool-1", expires_at: later }, "task-1");
  ev("worker-1", "signal.progress", 500, { fraction: 0.5 }, "task-1");
  ev("worker-2", "signal.request", 600, { request_id: "req-1", request_kind: "clarification", dedupe_key: "which-format" }, "task-2");
  ev("worker-1", "signal.result", 700, { result_kind: "json", success: true }, "task-1");
  ev("worker-1", "tree.node_completed", 800, { result_source: "completion_event" }, "task-1");
  ev("worker-2", "tree.node_status", 900, { status: "blocked", reason: "waiting_for_input" }, "task-2");
  return out;
}

async function main(argv: string[]): Promise<void> {
  const flag = (name: string, def: string) => { const i = argv.indexOf("--" + name); return i >= 0 ? argv[i + 1] : def; };
  const run = flag("run", "run-ts-" + ulid(new Date()).toLowerCase());
  const topic = flag("topic", "canopy.agent-events.v1");
  const base = new Date(flag("base-time", new Date().toISOString()));
  if (isNaN(base.getTime())) throw new Error("--base-time: want an RFC 3339 time like 2026-02-14T10:00:00Z");
  const evs = events(run, base);
  if (argv.includes("--dry-run")) {
    for (const e of evs) console.log(JSON.stringify(e));
    return;
  }
  const { Kafka, Partitioners } = await import("kafkajs"); // only needed to really produce
  const kafka = new Kafka({ clientId: "canopy-example-ts", brokers: flag("brokers", "127.0.0.1:9092").split(",") });
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, idempotent: true });
  await producer.connect();
  const trace = randomBytes(16).toString("hex"); // one trace for the run: its wakes' spans continue it
  try {
    await producer.send({ topic, messages: evs.map((e) => ({ key: run, value: JSON.stringify(e), headers: {
      "content-type": "application/cloudevents+json", traceparent: `00-${trace}-${randomBytes(8).toString("hex")}-01` } })) });
  } finally {
    await producer.disconnect();
  }
  console.error(`produced ${evs.length} events of run ${run} to ${topic}`);
}

main(process.argv.slice(2)).catch((err) => { console.error("producer:", err); process.exit(1); });
