// validate judges events by the contract's schemas, with problems that
// name the field; the Validator refuses what it does not implement.
import * as assert from "node:assert/strict";
import { test } from "node:test";
import { SchemaError, ValidationError, Validator, assertValid, events, validate } from "../src/index";

function base() {
  return events.toolStarted({ runId: "run-1", agentId: "w", time: "2026-02-14T10:00:00Z", callId: "c1", toolName: "grep" });
}

const problems = (v: unknown) => validate(v).map((p) => `${p.path}: ${p.message}`);

test("a valid event has no problems", () => {
  assert.deepEqual(validate(base()), []);
});

test("every problem of an event is named, by field", () => {
  const ev = { ...base(), schemaversion: 2, sessionid: "", time: "2026-02-30T10:00:00Z", data: { call_id: "c1", tool_name: "grep", call_kind: "magic", extra: 1 } };
  const got = problems(ev);
  for (const want of [/^schemaversion: /, /^sessionid: empty/, /^time: .*not a day/, /^data\.call_kind: "magic" is not one of/, /^data\.extra: unknown field/]) {
    assert.ok(got.some((p) => want.test(p)), `no problem like ${want} in ${JSON.stringify(got)}`);
  }
  assert.equal(new Set(got).size, got.length, "a problem said twice");
  assert.match(problems({ ...base(), data: { tool_name: "grep" } }).join("\n"), /^data\.call_id: required$/m);
  assert.match(problems({ ...base(), type: "tree.unknown" }).join("\n"), /^type: "tree\.unknown" is not one of/m);
  assert.match(problems({ ...base(), runid: "a\u0001b" }).join("\n"), /^runid: .*control character/m);
  assert.match(problems({ ...base(), agentid: "x".repeat(257) }).join("\n"), /^agentid: 257 characters: at most 256/m);
  // Code points, as the Go decoder counts: 256 emoji are 512 UTF-16 units and valid.
  assert.deepEqual(problems({ ...base(), agentid: "😀".repeat(256) }), []);
  assert.match(problems({ ...base(), data: { call_id: "c1", tool_name: "grep", command: "x".repeat(513) } }).join("\n"), /^data\.command: 513 characters: at most 512/m);
});

test("integers are judged exactly, to the contract's 64-bit bounds", () => {
  const usage = (n: number) => events.modelUsage({ runId: "r", agentId: "a", time: "2026-02-14T10:00:00Z", model: "m", inputTokens: n });
  assert.deepEqual(validate(usage(2 ** 62)), []);
  assert.match(problems(usage(2 ** 63)).join(), /data\.input_tokens: .*at most 9223372036854775807/);
  assert.match(problems(usage(-1)).join(), /data\.input_tokens: -1: at least 0/);
  assert.match(problems(usage(1.5)).join(), /data\.input_tokens: 1\.5: want integer/);
});

test("what is not JSON is refused before the schemas", () => {
  const p = (data: Record<string, unknown>) => problems({ ...base(), data: { call_id: "c1", tool_name: "grep", ...data } }).join("\n");
  assert.match(p({ duration_ms: NaN }), /data\.duration_ms: NaN: JSON has no such number/);
  assert.match(p({ duration_ms: 10n }), /data\.duration_ms: a BigInt/);
  assert.match(p({ command: "a\ud800b" }), /data\.command: not valid Unicode/);
});

test("the URIs are judged as the projector judges them (Go's url.Parse)", () => {
  const src = (s: string) => problems({ ...base(), source: s }).join("\n");
  for (const good of ["/agents/worker-7", "https://canopy.dev/x?y#z", "urn:canopy:worker", "a b", "//host:80/p", "http://[::1]:80/", "x%41y"]) {
    assert.equal(src(good), "", good);
  }
  for (const [bad, why] of [[":x", /missing protocol scheme/], ["1a:b", /first path segment/], ["x%zz", /invalid URL escape/], ["http://a b/", /invalid character " " in host name/],
    ["http://[1.2.3.4]/", /invalid host/], ["http://h:port/", /invalid port/], ["a\\b", /backslash/], ["http://[fe80::1%25en0]/", /bad IPv6 host/]] as const) {
    assert.match(src(bad), why, bad);
  }
  assert.match(problems({ ...base(), dataschema: "/relative" }).join(), /dataschema: .*want a scheme/);
  assert.deepEqual(problems({ ...base(), dataschema: "https://canopy.dev/schema" }), []);
});

test("assertValid throws a ValidationError with the problems", () => {
  assert.throws(() => assertValid({ ...base(), data: null }), (e: unknown) =>
    e instanceof ValidationError && e.problems.some((p) => p.path === "data") && /^canopy: invalid tool\.started /.test(e.message));
});

test("the Validator refuses a schema it cannot judge rather than ignore part of it", () => {
  assert.throws(() => new Validator({ "a.json": { type: "object", unevaluatedProperties: false } }), SchemaError);
  assert.throws(() => new Validator({ "a.json": { type: "string", format: "email" } }), /format email/);
  assert.throws(() => new Validator({ "a.json": { $ref: "b.json#/x" } }), /no schema b\.json/);
  const v = new Validator({ "a.json": { $defs: { n: { type: "integer", maximum: 3 } }, properties: { x: { $ref: "#/$defs/n" } } } });
  assert.deepEqual(v.validate("a.json", { x: 4 }).map((p) => p.path), ["x"]);
});
