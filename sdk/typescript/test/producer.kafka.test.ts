// Producer against a broker: what it writes is keyed and placed as canopy
// requires; what it refuses to send, and what Kafka refuses, is named.
import * as assert from "node:assert/strict";
import { test } from "node:test";
import { BUILDERS, DeliveryError, EVENT_TYPES, type Event, FIELDS, Producer, ValidationError, events, partition } from "../src/index";
import { brokers, needsBroker, readJSON, unique } from "./helpers";
import { createTopics, endOffsets, readAll } from "./kafka";

const PARTITIONS = 4;
const quick = { retry: { retries: 1, initialRetryTime: 50, maxRetryTime: 200 } };

// oneOfEach is an event of every type, built from schema/examples by its
// builder, each of its own run.
function oneOfEach(): Event[] {
  return EVENT_TYPES.map((type, i) => {
    const ex = readJSON(`schema/examples/${type}.json`) as Record<string, unknown>;
    const camel = Object.fromEntries(Object.entries(FIELDS[type]).map(([c, w]) => [w, c]));
    const f: Record<string, unknown> = { runId: `run-ts-${i}`, agentId: ex.agentid, time: ex.time, correlationId: ex.correlationid, sessionId: ex.sessionid,
      source: type === "conductor.wake_received" ? ex.source : undefined };
    for (const [k, v] of Object.entries((ex.data ?? {}) as Record<string, unknown>)) f[camel[k]] = v;
    return (BUILDERS[type] as (f: unknown) => Event)(f);
  });
}

test("every event type, sent, is keyed by its run, in murmur2's partition, with the CloudEvents content type", needsBroker, async () => {
  // sdk/typescript_test.go made this prefix's topics, and decodes what is sent here with the projector's decoder.
  let prefix = process.env.CANOPY_PREFIX;
  if (!prefix) {
    prefix = unique("produce");
    await createTopics([{ topic: `${prefix}.agent-events.v1`, numPartitions: PARTITIONS }]);
  }
  const built = oneOfEach();
  const p = new Producer(brokers, { source: "/apps/sdk-test", prefix });
  let evs: Event[];
  try {
    evs = await p.send(built, { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" });
  } finally {
    await p.close();
  }
  // Built without a source, sent with the producer's; but the one built with its own keeps it. Ids stay.
  assert.deepEqual(evs.map((e) => e.id), built.map((e) => e.id));
  assert.deepEqual(evs.map((e) => e.source), built.map((e) => (e.type === "conductor.wake_received" ? e.source : "/apps/sdk-test")));
  const got = await readAll(`${prefix}.agent-events.v1`, evs.length);
  assert.equal(got.length, evs.length);
  for (const { partition: at, message } of got) {
    const ev = evs.find((e) => e.runid === message.key?.toString());
    assert.ok(ev, `a record keyed ${message.key?.toString()}`);
    assert.equal(at, partition(ev.runid, PARTITIONS), `${ev.type} of ${ev.runid}`);
    assert.equal(message.headers?.["content-type"]?.toString(), "application/cloudevents+json");
    assert.equal(message.headers?.traceparent?.toString(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    assert.deepEqual(JSON.parse(message.value!.toString()), JSON.parse(JSON.stringify(ev)));
  }
});

test("an invalid event is refused before anything of its send is sent", needsBroker, async () => {
  const prefix = unique("invalid");
  const topic = `${prefix}.agent-events.v1`;
  await createTopics([{ topic, numPartitions: 1 }]);
  const good = events.signalHeartbeat({ runId: "run-1", agentId: "w" });
  const bad = { ...events.treeNodeStatus({ runId: "run-1", agentId: "w", status: "running" }), data: { status: "sleeping" } } as unknown as Event;
  const p = new Producer(brokers, { source: "/apps/sdk-test", prefix });
  try {
    await assert.rejects(p.send([good, bad]), (e: unknown) => e instanceof ValidationError && e.problems.some((x) => x.path === "data.status"));
    assert.equal(await endOffsets(topic), 0);
    const sent = await p.send(good);
    assert.equal(sent.source, "/apps/sdk-test");
    assert.equal(await endOffsets(topic), 1);
    await assert.rejects(p.send(good, { traceparent: "00-nope" }), TypeError);
  } finally {
    await p.close();
  }
});

test("a topic that does not exist is named, and not created", needsBroker, async () => {
  const prefix = unique("missing");
  const p = new Producer(brokers, { source: "/apps/sdk-test", prefix, kafka: quick });
  const ev = events.signalHeartbeat({ runId: "run-1", agentId: "w" });
  try {
    await assert.rejects(p.send(ev), (e: unknown) => {
      assert.ok(e instanceof DeliveryError, String(e));
      assert.equal(e.code, "UNKNOWN_TOPIC_OR_PARTITION");
      assert.deepEqual(e.eventIds, [ev.id]);
      assert.equal(e.topic, `${prefix}.agent-events.v1`);
      assert.match(e.message, new RegExp(`Kafka refused event ${ev.id} for ${prefix}\\.agent-events\\.v1: UNKNOWN_TOPIC_OR_PARTITION`));
      return true;
    });
  } finally {
    await p.close();
  }
  const admin = (await import("./kafka")).kafka.admin();
  await admin.connect();
  try {
    assert.ok(!(await admin.listTopics()).includes(`${prefix}.agent-events.v1`), "the producer created the topic");
  } finally {
    await admin.disconnect();
  }
});

test("a record over the topic's max.message.bytes is refused as MESSAGE_TOO_LARGE", needsBroker, async () => {
  const prefix = unique("large");
  await createTopics([{ topic: `${prefix}.agent-events.v1`, numPartitions: 1, configEntries: [{ name: "max.message.bytes", value: "2000" }] }]);
  const ev = events.conductorWakeReceived({ runId: "run-1", agentId: "conductor", wakeId: "w", agentIds: Array.from({ length: 64 }, (_, i) => `agent-${i}-${"x".repeat(200)}`) });
  const p = new Producer(brokers, { source: "/apps/sdk-test", prefix, kafka: quick });
  try {
    await assert.rejects(p.send(ev), (e: unknown) => e instanceof DeliveryError && e.code === "MESSAGE_TOO_LARGE" && !e.retriable &&
      e.message.includes("MESSAGE_TOO_LARGE"));
  } finally {
    await p.close();
  }
});
