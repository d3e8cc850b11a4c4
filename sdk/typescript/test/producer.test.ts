// Producer without a broker: what it cannot do is named.
import * as assert from "node:assert/strict";
import { test } from "node:test";
import { ConfigError, DeliveryError, Producer, events, stderrLogger } from "../src/index";

const quiet = { ...stderrLogger, error() {}, warn() {} };

test("no broker to reach: a DeliveryError naming the events and the client's error", async () => {
  const p = new Producer("127.0.0.1:1", { source: "/apps/test", logger: quiet, kafka: { retry: { retries: 0 }, connectionTimeout: 500 } });
  const evs = [events.signalHeartbeat({ runId: "r", agentId: "a" }), events.signalHeartbeat({ runId: "r", agentId: "b" })];
  await assert.rejects(p.send(evs), (e: unknown) => {
    assert.ok(e instanceof DeliveryError, String(e));
    assert.deepEqual(e.eventIds, evs.map((x) => x.id));
    assert.equal(e.code, "KafkaJSConnectionError");
    assert.match(e.message, /^canopy: 2 events not delivered to canopy\.agent-events\.v1: KafkaJSConnectionError: .*ECONNREFUSED/);
    return true;
  });
  await p.close();
  await assert.rejects(p.send(evs[0]), (e: unknown) => e instanceof DeliveryError && e.code === "CLOSED" && e.eventIds[0] === evs[0].id);
});

test("options: every problem at once", () => {
  assert.throws(() => new Producer(" , ", { source: "", prefix: "a b" }), (e: unknown) => e instanceof ConfigError && e.problems.length === 3);
  assert.throws(() => new Producer("h:1", { source: "1a:b" }), (e: unknown) => e instanceof ConfigError && /^source .*first path segment/.test(e.problems[0]));
});
