// Conductor against a broker: pkg/wake's semantics. (The transactions a
// projector writes wakes in, and the overtaking priority wake, are
// examples/interop's TestConductorBehaviour, which examples/typescript's
// conductor, on this package, passes.)
import * as assert from "node:assert/strict";
import { test } from "node:test";
import { Conductor, ConfigError, DeliveryError, HandlerError, type Received, type Wake, derive, partition } from "../src/index";
import { brokers, needsBroker, unique, waitFor } from "./helpers";
import { committed, createTopics, kafka, readAll } from "./kafka";

const quick = { retry: { retries: 1, initialRetryTime: 50, maxRetryTime: 200 } };
const T0 = Date.parse("2026-02-14T10:00:00.000Z");

// wake is a wake of run, in the shape canopy publishes, with a result trigger of worker-<n>.
function wake(n: number, run: string, lane: Wake["lane"], over: { generatedAt?: number; ageMs?: number } = {}): Wake {
  const at = new Date(T0 + n * 1000).toISOString();
  return {
    wake_id: derive(T0 + n * 1000, run, String(n), lane), schema_version: 1, run_id: run, lane,
    triggers: [{ kind: lane === "priority" ? "human_input" : "result", event_id: `ev-${n}`, agent_id: `worker-${n}`, correlation_id: null, at, detail: null }],
    agent_tree_snapshot: {
      snapshot_id: derive(T0, "snap", run, String(n)), generated_at: new Date(over.generatedAt ?? T0).toISOString(), as_of_event_seq: n,
      root_agent_id: "conductor", scope: { run_id: run, session_id: "session-1", thread_id: null }, nodes: [],
      summary: { node_count_total: 0, node_count_included: 0, counts_by_status: { idle: 0, running: 0, blocked: 0, failed: 0, completed: 0, unknown: 0 },
        blocked_count: 0, failed_count: 0, overdue_lease_count: 0, active_correlation_handles: [], open_request_count: 0 },
      truncated: false, truncation_meta: { omitted_count_total: 0 } as Wake["agent_tree_snapshot"]["truncation_meta"], stale: false,
      snapshot_age_ms: over.ageMs ?? 0,
    },
  };
}

const PARTITIONS = 2;

// topics makes a prefix of the test's own and its topics (the agent events topic unless noAcks).
async function topics(stem: string, noAcks = false) {
  const prefix = unique(stem);
  const names = { agentEvents: `${prefix}.agent-events.v1`, wakes: `${prefix}.wakes.v1`, priority: `${prefix}.wakes-priority.v1` };
  await createTopics([names.wakes, names.priority, ...(noAcks ? [] : [names.agentEvents])].map((topic) => ({ topic, numPartitions: PARTITIONS })));
  return { prefix, ...names };
}

async function produce(topic: string, ...wakes: Wake[]): Promise<void> {
  const p = kafka.producer();
  await p.connect();
  try {
    await p.send({ topic, messages: wakes.map((w) => ({ key: w.run_id, partition: partition(w.run_id, PARTITIONS), value: JSON.stringify(w) })) });
  } finally {
    await p.disconnect();
  }
}

type Ack = { id: string; agentid: string; sessionid?: string; data: { wake_id: string; agent_ids?: string[] } };
const acksOf = async (topic: string, n: number) => (await readAll(topic, n)).map((m) => JSON.parse(m.message.value!.toString()) as Ack);

test("a handler's failure stops run: that wake is neither acknowledged nor committed", needsBroker, async () => {
  const t = await topics("fail");
  const ws = [1, 2, 3].map((n) => wake(n, "run-a", "normal"));
  await produce(t.wakes, ...ws);
  const group = unique("g");
  const c = new Conductor(brokers, { group, prefix: t.prefix, kafka: quick });
  const seen: string[] = [];
  await assert.rejects(c.run((w) => {
    seen.push(w.wake_id);
    if (w.wake_id === ws[1].wake_id) throw new Error("planning failed");
  }), (e: unknown) => e instanceof HandlerError && e.wakeId === ws[1].wake_id && e.runId === "run-a" && /planning failed/.test(e.message));
  assert.deepEqual(seen, [ws[0].wake_id, ws[1].wake_id], "a wake was handled after the failure");
  const acks = await acksOf(t.agentEvents, 1);
  assert.deepEqual(acks.map((a) => a.data.wake_id), [ws[0].wake_id]);
  // The first wake (offset 0) is committed; the failed one (offset 1) is not.
  assert.equal((await committed(group, t.wakes)).get(partition("run-a", PARTITIONS)), 1);
  assert.equal(c.stats.acked, 1);
});

test("duplicates are handled and acknowledged once, and committed", needsBroker, async () => {
  const t = await topics("dupe");
  const [a, b, c3] = [1, 2, 3].map((n) => wake(n, "run-a", "normal"));
  await produce(t.wakes, a, b, a, c3, b);
  const group = unique("g");
  const c = new Conductor(brokers, { group, prefix: t.prefix });
  const seen: string[] = [];
  const run = c.run((w) => void seen.push(w.wake_id));
  try {
    await waitFor("every wake committed", async () => (await committed(group, t.wakes)).get(partition("run-a", PARTITIONS)) === 5);
  } finally {
    await c.stop();
  }
  await run;
  assert.deepEqual(seen, [a.wake_id, b.wake_id, c3.wake_id]);
  assert.deepEqual(c.stats, { delivered: 3, duplicates: 2, undecodable: 0, acked: 3 });
  const acks = await acksOf(t.agentEvents, 3);
  assert.deepEqual(acks.map((x) => x.data.wake_id).sort(), [a.wake_id, b.wake_id, c3.wake_id].sort());
  // The acknowledgement names the result's agent, from the snapshot's root, in its session.
  const ackA = acks.find((x) => x.data.wake_id === a.wake_id)!;
  assert.deepEqual([ackA.agentid, ackA.sessionid, ackA.data.agent_ids], ["conductor", "session-1", ["worker-1"]]);
});

test("the priority backlog goes before any normal wake", needsBroker, async () => {
  const t = await topics("prio");
  const normal = [1, 2, 3, 4].map((n) => wake(n, n % 2 ? "run-a" : "run-b", "normal"));
  const prio = [5, 6].map((n) => wake(n, n % 2 ? "run-a" : "run-b", "priority"));
  await produce(t.wakes, ...normal);
  await produce(t.priority, ...prio);
  const c = new Conductor(brokers, { group: unique("g"), prefix: t.prefix });
  const seen: string[] = [];
  const run = c.run(async (w) => {
    seen.push(w.wake_id);
  });
  try {
    await waitFor("every wake", () => seen.length === 6);
  } finally {
    await c.stop();
  }
  await run;
  assert.deepEqual(seen.slice(0, 2).sort(), prio.map((w) => w.wake_id).sort(), `handled ${JSON.stringify(seen)}`);
});

test("staleness is judged at receipt: the snapshot's age plus the time since it was generated", needsBroker, async () => {
  const t = await topics("stale");
  const old = wake(1, "run-a", "normal", { generatedAt: T0, ageMs: 500 });
  const fresh = wake(2, "run-a", "normal", { generatedAt: T0 + 1000, ageMs: 0 });
  await produce(t.wakes, old, fresh);
  const now = T0 + 10_000;
  const c = new Conductor(brokers, { group: unique("g"), prefix: t.prefix, now: () => now });
  const got: Received[] = [];
  const run = c.run((_w, r) => void got.push(r));
  try {
    await waitFor("both wakes", () => got.length === 2);
  } finally {
    await c.stop();
  }
  await run;
  assert.deepEqual(got.map((r) => [r.ageMs, r.stale]), [[10_500, true], [9_000, false]]);
  assert.equal(got[0].receivedAt.getTime(), now);
  assert.deepEqual([got[0].lane, got[0].triggers, got[0].asOfEventSeq, got[0].offset], ["normal", ["result"], 1, "0"]);
});

test("an acknowledgement Kafka refuses stops run, and its wake is not committed", needsBroker, async () => {
  const t = await topics("noack", true);
  const w = wake(1, "run-a", "normal");
  await produce(t.wakes, w);
  const group = unique("g");
  const c = new Conductor(brokers, { group, prefix: t.prefix, kafka: quick });
  let handled = 0;
  await assert.rejects(c.run(() => void handled++), (e: unknown) => e instanceof DeliveryError && e.code === "UNKNOWN_TOPIC_OR_PARTITION" &&
    e.topic === t.agentEvents);
  assert.equal(handled, 1);
  assert.ok(![...(await committed(group, t.wakes)).values()].some((o) => o >= 0), "a wake is committed without its acknowledgement");
});

test("stop aborts the handler's signal; a wake it gives up is neither acknowledged nor committed", needsBroker, async () => {
  const t = await topics("stop");
  const [a, b] = [1, 2].map((n) => wake(n, "run-a", "normal"));
  await produce(t.wakes, a, b);
  const group = unique("g");
  const c = new Conductor(brokers, { group, prefix: t.prefix });
  let entered = false;
  const seen: string[] = [];
  const run = c.run(async (w, _r, signal) => {
    seen.push(w.wake_id);
    if (w.wake_id !== b.wake_id) return;
    entered = true;
    await new Promise((_, reject) => signal.addEventListener("abort", () => reject(new Error("aborted"))));
  });
  await waitFor("the second wake's handler", () => entered);
  await c.stop();
  await run; // a shutdown, not a failure
  assert.deepEqual(seen, [a.wake_id, b.wake_id]);
  assert.equal((await committed(group, t.wakes)).get(partition("run-a", PARTITIONS)), 1);
  assert.equal(c.stats.acked, 1);
});

test("options: every problem at once", () => {
  assert.throws(() => new Conductor(" ", { group: "", staleAfterMs: -1, dedupeSize: 0, prefix: "a b" }), (e: unknown) =>
    e instanceof ConfigError && e.problems.length === 5);
});
