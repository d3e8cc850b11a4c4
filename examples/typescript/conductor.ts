// A conductor in TypeScript on @canopy/agents (sdk/typescript): consume canopy's wakes, priority
// lane first, and acknowledge each one.
//
//   npm ci && npm run --silent conductor -- --brokers 127.0.0.1:9092 --group my-conductor
//
// The package's Conductor does what a conductor must (docs/CLIENTS.md "Consuming wakes"): it reads
// read_committed, takes the priority backlog and every priority wake fetched before the next
// normal one, drops duplicates by wake_id, judges staleness at receipt, acknowledges each wake
// with conductor.wake_received once the handler returned, and only then commits it. The same
// behaviour, flags and output as ../python/conductor.py.
import { Conductor, type Logger } from "@canopy/agents";

async function main(argv: string[]): Promise<void> {
  const flag = (name: string, def: string) => { const i = argv.indexOf("--" + name); return i >= 0 ? argv[i + 1] : def; };
  const workMs = Number(flag("work-ms", "0")); // stands in for a real conductor's planning (a model call)
  const printWakes = argv.includes("--print-wakes"); // each wake's JSON instead of a summary line
  // Warnings and errors (the package's and kafkajs's) go to stderr: stdout is for wakes.
  const log = (level: string) => (msg: string, fields?: Record<string, unknown>) => console.error(JSON.stringify({ level, msg, ...fields }));
  const logger: Logger = { info() {}, warn: log("warn"), error: log("error") };
  const conductor = new Conductor(flag("brokers", process.env.CANOPY_BROKERS || "127.0.0.1:9092"), {
    group: flag("group", "canopy-conductor-ts"), prefix: flag("prefix", "canopy"), staleAfterMs: Number(flag("stale-after-ms", "10000")),
    clientId: "canopy-conductor-ts", logger,
  });
  for (const sig of ["SIGTERM", "SIGINT"] as const) process.on(sig, () => void conductor.stop()); // leave the groups, then exit 0

  await conductor.run(async (w, r, signal) => {
    // Metadata only, never node contents.
    console.error(JSON.stringify({ event: "conductor.wake.received", wake_id: r.wakeId, run_id: r.runId, lane: r.lane,
      snapshot_id: r.snapshotId, as_of_event_seq: r.asOfEventSeq, topic: r.topic, partition: r.partition, offset: Number(r.offset),
      nodes_included: r.nodesIncluded, nodes_omitted: r.nodesOmitted, truncated: r.truncated, stale: r.stale, age_ms: r.ageMs, bytes: r.bytes,
      ...(r.part ? { part: r.part.number, parts: r.part.count } : {}) }));
    const s = w.agent_tree_snapshot;
    const part = w.part ? ` part=${w.part.number}/${w.part.count}` : "";
    if (printWakes) console.log(JSON.stringify(w));
    else console.log(`${w.lane === "priority" ? "WAKE!" : "wake "} ${w.run_id} seq=${s.as_of_event_seq}${part} ` +
      `[${w.triggers.map((t) => `${t.kind}:${t.agent_id}`).join(" ")}] nodes=${s.summary.node_count_included}/${s.summary.node_count_total}`);
    // ... a real conductor plans and delegates here; the package acknowledges when this returns.
    if (workMs > 0) await new Promise((resolve) => { const t = setTimeout(resolve, workMs); signal.addEventListener("abort", () => { clearTimeout(t); resolve(undefined); }); });
  });
}

main(process.argv.slice(2)).catch((err) => { console.error("conductor:", err); process.exit(1); });
