// The builders follow the contract: one per event type of schema/events,
// each taking every field of its payload, and building exactly the example
// events of schema/examples; ids are derived from content.
import * as assert from "node:assert/strict";
import * as fs from "fs";
import * as path from "path";
import { test } from "node:test";
import { BUILDERS, EVENT_TYPES, FIELDS, SCHEMAS, type Event, type EventType, canonicalJSON, events, ulidTime, validate } from "../src/index";
import { readJSON, repo } from "./helpers";

const schemaTypes = (): string[] =>
  (((SCHEMAS["event.schema.json"] as { allOf: { properties?: { type?: { enum?: string[] } } }[] }).allOf[1].properties?.type?.enum) ?? []);

test("a builder for every event type of schema/events, and no other", () => {
  const onDisk = fs.readdirSync(path.join(repo, "schema/events")).filter((f) => f.endsWith(".schema.json") && f !== "event.schema.json" && f !== "envelope.schema.json")
    .map((f) => f.replace(/\.schema\.json$/, "")).sort();
  assert.deepEqual([...EVENT_TYPES].sort(), onDisk, "EVENT_TYPES are not schema/events' types: run npm run generate");
  assert.deepEqual([...EVENT_TYPES].sort(), [...schemaTypes()].sort());
  for (const type of EVENT_TYPES) {
    const name = type.replace(/[._]([a-z])/g, (_, c: string) => c.toUpperCase());
    assert.equal(typeof (events as Record<string, unknown>)[name], "function", `no events.${name} for ${type}`);
    assert.equal(BUILDERS[type], (events as Record<string, unknown>)[name]);
  }
});

test("each builder takes every field of its payload's schema, as on disk", () => {
  for (const type of EVENT_TYPES) {
    const s = readJSON(`schema/events/${type}.schema.json`) as { properties: { data: { properties?: Record<string, unknown> } } };
    assert.deepEqual(Object.values(FIELDS[type]).sort(), Object.keys(s.properties.data.properties ?? {}).sort(), `${type}: run npm run generate`);
  }
});

// build builds an example event again with its type's builder.
function build(example: Record<string, unknown>): Event {
  const type = example.type as EventType;
  const camel = Object.fromEntries(Object.entries(FIELDS[type]).map(([c, wire]) => [wire, c]));
  const f: Record<string, unknown> = {
    id: example.id, source: example.source, time: example.time, runId: example.runid, agentId: example.agentid,
    sessionId: example.sessionid, threadId: example.threadid, correlationId: example.correlationid, causationId: example.causationid,
    subject: example.subject, dataschema: example.dataschema,
  };
  for (const [k, v] of Object.entries((example.data ?? {}) as Record<string, unknown>)) {
    assert.ok(camel[k], `${type}: the builder takes no ${k}`);
    f[camel[k]] = v;
  }
  return (BUILDERS[type] as (f: unknown) => Event)(f);
}

test("the builders build schema/examples exactly, and validate accepts them", () => {
  for (const type of EVENT_TYPES) {
    const example = readJSON(`schema/examples/${type}.json`) as Record<string, unknown>;
    const ev = build(example);
    assert.equal(canonicalJSON(ev), canonicalJSON({ datacontenttype: "application/json", ...example }), type);
    assert.deepEqual(validate(ev), [], type);
    assert.deepEqual(validate(example), [], type);
  }
});

test("builders fill the envelope and leave out what is not given", () => {
  const before = Date.now();
  const ev = events.treeNodeCreated({ runId: "run-1", agentId: "worker-1", role: "worker", parentAgentId: "planner", capability: undefined });
  assert.equal(ev.specversion, "1.0");
  assert.equal(ev.source, "/agents/worker-1");
  assert.equal(ev.datacontenttype, "application/json");
  assert.equal(ev.schemaversion, 1);
  assert.match(ev.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.ok(Date.parse(ev.time) >= before - 1 && Date.parse(ev.time) <= Date.now());
  assert.deepEqual(ev.data, { role: "worker", parent_agent_id: "planner" });
  assert.ok(!("sessionid" in ev) && !("capability" in ev.data));
  assert.ok(Object.isFrozen(ev) && Object.isFrozen(ev.data));
  // A Date is written in UTC with milliseconds, in the envelope and in the payload.
  const at = new Date(Date.UTC(2026, 1, 14, 10, 0, 0, 5));
  const lease = events.leaseAcquired({ runId: "r", agentId: "a", time: at, owner: "pool", expiresAt: new Date(at.getTime() + 60_000) });
  assert.equal(lease.time, "2026-02-14T10:00:00.005Z");
  assert.equal(lease.data.expires_at, "2026-02-14T10:01:00.005Z");
  // A required null stays: tree.parent_hint's artifact_ids is always sent.
  assert.deepEqual(events.treeParentHint({ runId: "r", agentId: "a", hintType: "read_json", artifactIds: null }).data, { hint_type: "read_json", artifact_ids: null });
});

test("event ids are ULIDs derived from the event's content and time", () => {
  const f = { runId: "run-1", agentId: "worker-1", time: "2026-02-14T10:00:00.123Z", status: "running" as const };
  const a = events.treeNodeStatus(f);
  assert.match(a.id, /^[0-7][0-9A-HJKMNP-TV-Z]{25}$/);
  assert.equal(a.id, events.treeNodeStatus({ ...f }).id, "the same event built again has another id");
  assert.equal(ulidTime(a.id), Date.parse(f.time));
  const others = [
    events.treeNodeStatus({ ...f, status: "blocked" }),
    events.treeNodeStatus({ ...f, runId: "run-2" }),
    events.treeNodeStatus({ ...f, agentId: "worker-2" }),
    events.treeNodeStatus({ ...f, time: "2026-02-14T10:00:00.124Z" }),
    events.treeNodeStatus({ ...f, reason: "x" }),
    events.treeNodeStatus({ ...f, sessionId: "s" }),
    events.treeNodeStatus({ ...f, subject: "x" }),
    events.signalProgress({ runId: "run-1", agentId: "worker-1", time: f.time }),
  ];
  assert.equal(new Set([a.id, ...others.map((e) => e.id)]).size, others.length + 1, "two different events have one id");
  assert.equal(events.treeNodeStatus({ ...f, id: "my-id" }).id, "my-id");
  // The source is not part of it: a Producer gives its own to events built without one.
  assert.equal(events.treeNodeStatus({ ...f, source: "/agents/other" }).id, a.id);
  // The time is, in UTC at millisecond precision however it is written.
  assert.equal(events.treeNodeStatus({ ...f, time: "2026-02-14T11:00:00.123+01:00" }).id, a.id);
});

test("ids are the Python package's (canopy-agents) for the same event", () => {
  // Each pinned from canopy.events in Python 3.11 with the same arguments.
  const at = new Date("2026-02-14T10:00:00Z");
  assert.equal(events.treeNodeCreated({ runId: "run-1", agentId: "worker-1", role: "worker", parentAgentId: "planner", capability: "wéb 🌳",
    time: "2026-02-14T11:00:00.123+01:00", sessionId: "s-1", correlationId: "task-1" }).id, "01KHDSFJBV2SHQXBKPRA8MBTGJ");
  assert.equal(events.signalHeartbeat({ runId: "run-2", agentId: "a", time: at }).id, "01KHDSFJ80REHSBXQMDN7K69YJ");
  assert.equal(events.conductorWakeReceived({ runId: "r", agentId: "conductor", wakeId: "w", agentIds: ["a", "b"], time: at, source: "/x" }).id,
    "01KHDSFJ80RYW02PCY80FFV1FG");
});
