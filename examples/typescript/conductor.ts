// A conductor in TypeScript: consume canopy's wakes with kafkajs, priority lane first, and
// acknowledge each one.
//
//   npm ci && npm run --silent conductor -- --brokers 127.0.0.1:9092 --group my-conductor
//
// Wakes are committed in Kafka transactions: kafkajs reads read_committed by default. Each wake is
// handled once: duplicates (same wake_id) are dropped. Staleness is recomputed at receipt. After
// handling a wake, a conductor.wake_received event goes to the agent-events topic (key = run id;
// kafkajs's DefaultPartitioner is murmur2 like canopy) so canopy's delivery watchdog marks the
// results the wake delivered as forwarded; only then is the wake's offset committed. The same
// behaviour, flags and output as ../python/conductor.py.
import { createHash } from "crypto";
import { CompressionCodecs, CompressionTypes, Consumer, EachMessagePayload, Kafka, KafkaMessage, logLevel, Partitioners } from "kafkajs";

// canopy's projectors write with franz-go's default compression, snappy, which kafkajs reads only
// with a codec registered (kafkajs-snappy, pure JavaScript; it has no type declarations).
// eslint-disable-next-line @typescript-eslint/no-require-imports
CompressionCodecs[CompressionTypes.Snappy] = require("kafkajs-snappy");

const B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"; // Crockford's base32, as ULIDs use

// ackId is the acknowledgement's ULID: the wake's time (the wake id is a ULID) and entropy from
// (source, wake id), so acknowledging a redelivered wake again gives the same id, a duplicate.
function ackId(wakeId: string, source: string, now: number): string {
  let ms = BigInt(now);
  if (/^[0-7][0-9A-HJKMNP-TV-Z]{25}$/.test(wakeId)) {
    ms = 0n;
    for (const c of wakeId.slice(0, 10)) ms = ms * 32n + BigInt(B32.indexOf(c));
  }
  const seed = createHash("sha256").update(`conductor.wake_received\0${source}\0${wakeId}`).digest().subarray(0, 10);
  let n = (ms << 80n) | BigInt("0x" + seed.toString("hex"));
  let s = "";
  for (let i = 0; i < 26; i++, n >>= 5n) s = B32[Number(n & 31n)] + s;
  return s;
}

// Turns lets one wake be handled at a time, and a normal wake only when no priority wake is
// waiting: neither one whose handler asks for the turn, nor one kafkajs has fetched and not yet
// handed over (the rest of a priority batch, counted by expect).
class Turns {
  private busy = false;
  private pendingPriority = 0;
  private waiting: { priority: (() => void)[]; normal: (() => void)[] } = { priority: [], normal: [] };
  expect(n: number): void {
    this.pendingPriority += n;
    this.next();
  }
  take(priority: boolean): Promise<void> {
    return new Promise((resolve) => {
      this.waiting[priority ? "priority" : "normal"].push(resolve);
      this.next();
    });
  }
  release(priority: boolean): void {
    this.busy = false;
    if (priority) this.pendingPriority--;
    this.next();
  }
  private next(): void {
    if (this.busy) return;
    const go = this.waiting.priority.shift() ?? (this.pendingPriority === 0 ? this.waiting.normal.shift() : undefined);
    if (go) {
      this.busy = true;
      go();
    }
  }
}

type Wake = {
  wake_id: string; run_id: string; lane: string; triggers: { kind: string; agent_id: string }[];
  // A run's triggers that do not fit one wake come as consecutive parts, each a wake; absent when
  // the wake was not split.
  part?: { number: number; count: number };
  agent_tree_snapshot: {
    snapshot_id: string; as_of_event_seq: number; generated_at: string; snapshot_age_ms: number; root_agent_id?: string | null;
    nodes: unknown[]; truncated: boolean; truncation_meta: { omitted_count_total: number };
    summary: { node_count_included: number; node_count_total: number };
  };
};

async function main(argv: string[]): Promise<void> {
  const flag = (name: string, def: string) => { const i = argv.indexOf("--" + name); return i >= 0 ? argv[i + 1] : def; };
  const brokers = flag("brokers", process.env.CANOPY_BROKERS || "127.0.0.1:9092").split(",");
  const prefix = flag("prefix", "canopy");
  const group = flag("group", "canopy-conductor-ts");
  const staleAfterMs = Number(flag("stale-after-ms", "10000"));
  const workMs = Number(flag("work-ms", "0")); // stands in for a real conductor's planning (a model call)
  const printWakes = argv.includes("--print-wakes"); // each wake's JSON instead of a summary line
  const source = "/conductors/" + group;
  const [prioTopic, normalTopic] = [`${prefix}.wakes-priority.v1`, `${prefix}.wakes.v1`];

  // kafkajs logs to stdout by default: warnings and errors go to stderr, stdout is for wakes.
  const kafka = new Kafka({ clientId: "canopy-conductor-ts", brokers, logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, label, log }) => console.error(JSON.stringify({ level: label, namespace, ...log })) });
  // One consumer (and group) per lane, as in Python, so a priority wake fetched while a normal
  // one is handled is taken next (Turns). Short fetch waits: a new wake is seen within 100 ms.
  const prio = kafka.consumer({ groupId: group + "-priority", maxWaitTimeInMs: 100 });
  const normal = kafka.consumer({ groupId: group, maxWaitTimeInMs: 100 });
  const acks = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, idempotent: true });
  const seen = new Set<string>(); // the last 10,000 wake ids, oldest first
  const turns = new Turns();
  let lastPriority = Date.now();

  // handle handles one wake, in its turn.
  const handle = async (consumer: Consumer, priority: boolean, topic: string, partition: number, message: KafkaMessage) => {
    await turns.take(priority);
    try {
      if (priority) lastPriority = Date.now();
      const raw = message.value ?? Buffer.alloc(0);
      const w: Wake = JSON.parse(raw.toString());
      if (!seen.has(w.wake_id)) {
        seen.add(w.wake_id);
        if (seen.size > 10_000) seen.delete(seen.values().next().value as string);
        const s = w.agent_tree_snapshot, now = Date.now();
        const age = s.snapshot_age_ms + Math.max(0, now - Date.parse(s.generated_at));
        console.error(JSON.stringify({ event: "conductor.wake.received", wake_id: w.wake_id, run_id: w.run_id, lane: w.lane,
          snapshot_id: s.snapshot_id, as_of_event_seq: s.as_of_event_seq, topic, partition, offset: Number(message.offset),
          nodes_included: s.nodes.length, nodes_omitted: s.truncation_meta.omitted_count_total, truncated: s.truncated,
          stale: age > staleAfterMs, age_ms: age, bytes: raw.length,
          ...(w.part ? { part: w.part.number, parts: w.part.count } : {}) })); // metadata only, never node contents
        const part = w.part ? ` part=${w.part.number}/${w.part.count}` : "";
        if (printWakes) console.log(raw.toString());
        else console.log(`${w.lane === "priority" ? "WAKE!" : "wake "} ${w.run_id} seq=${s.as_of_event_seq}${part} ` +
          `[${w.triggers.map((t) => `${t.kind}:${t.agent_id}`).join(" ")}] nodes=${s.summary.node_count_included}/${s.summary.node_count_total}`);
        // ... a real conductor plans and delegates here, then acknowledges:
        if (workMs > 0) await new Promise((r) => setTimeout(r, workMs));
        const agents = [...new Set(w.triggers.filter((t) => t.kind === "result" || t.kind === "status_completed").map((t) => t.agent_id))];
        const ack = { specversion: "1.0", id: ackId(w.wake_id, source, now), source, type: "conductor.wake_received",
          time: new Date().toISOString(), runid: w.run_id, agentid: s.root_agent_id || "conductor", schemaversion: 1,
          data: { wake_id: w.wake_id, snapshot_id: s.snapshot_id, ...(agents.length ? { agent_ids: agents } : {}) } };
        await acks.send({ topic: `${prefix}.agent-events.v1`, messages: [{ key: w.run_id, value: JSON.stringify(ack),
          headers: { "content-type": "application/cloudevents+json" } }] });
      }
      // Only after the acknowledgement is written (a duplicate's was, the first time).
      await consumer.commitOffsets([{ topic, partition, offset: (BigInt(message.offset) + 1n).toString() }]);
    } finally {
      if (priority) lastPriority = Date.now();
      turns.release(priority);
    }
  };

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await Promise.allSettled([prio.disconnect(), normal.disconnect()]); // leave the groups
    await acks.disconnect();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);

  await acks.connect();
  // The priority backlog at start: join the priority lane's group and take what waits there
  // until the lane is quiet for a second, before taking any normal wake.
  const joined = new Promise<void>((resolve) => prio.on(prio.events.GROUP_JOIN, () => resolve()));
  await prio.connect();
  await prio.subscribe({ topics: [prioTopic], fromBeginning: true });
  // Whole batches, every partition's at once: what is fetched is known to be waiting.
  await prio.run({ autoCommit: false, eachBatchAutoResolve: false, partitionsConsumedConcurrently: 64,
    eachBatch: async ({ batch, resolveOffset, isRunning, isStale }) => {
      let left = batch.messages.length;
      turns.expect(left);
      try {
        for (const message of batch.messages) {
          if (!isRunning() || isStale()) break; // stopping, or the partition moved: leave the rest
          left--; // its turn's release counts it handled
          await handle(prio, true, batch.topic, batch.partition, message);
          resolveOffset(message.offset);
        }
      } finally {
        turns.expect(-left);
      }
    } });
  await joined;
  lastPriority = Date.now();
  while (!stopping && Date.now() - lastPriority < 1000) await new Promise((r) => setTimeout(r, 50));
  if (stopping) return;
  await normal.connect();
  await normal.subscribe({ topics: [normalTopic], fromBeginning: true });
  await normal.run({ autoCommit: false,
    eachMessage: ({ topic, partition, message }: EachMessagePayload) => handle(normal, false, topic, partition, message) });
}

main(process.argv.slice(2)).catch((err) => { console.error("conductor:", err); process.exit(1); });
