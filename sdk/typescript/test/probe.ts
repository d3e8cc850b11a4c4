// probe answers sdk/typescript_test.go's questions, one JSON line each on
// stdin, so that the Go side can hold the package to Go's own code:
//   {"op":"partition","key":"<base64>","n":4}  -> {"sdk":1,"kafkajs":1}
//   {"op":"validate","doc":"<JSON text>"}       -> {"problems":[...],"wire":"<what JSON.stringify sends>"}
//   {"op":"ack","wake":"<JSON>","source":"/conductors/x","agent":"conductor","at":1771063200000} -> {"event":"<JSON>"}
//   {"op":"received","wake":"<JSON>","now":1771063200000,"staleAfterMs":10000} -> {"ageMs":..}
import { Partitioners } from "kafkajs";
import * as readline from "readline";
import { ackEvent, partition, staleAge, validate } from "../src/index";

const kafkajs = Partitioners.DefaultPartitioner();

function answer(q: Record<string, unknown>): unknown {
  switch (q.op) {
    case "partition": {
      const key = Buffer.from(q.key as string, "base64");
      const n = q.n as number;
      const partitionMetadata = Array.from({ length: n }, (_, i) => ({ partitionId: i, leader: 0, replicas: [0], isr: [0], partitionErrorCode: 0 }));
      return { sdk: partition(key, n), kafkajs: kafkajs({ topic: "t", partitionMetadata, message: { key, value: null } }) };
    }
    case "validate": {
      const v: unknown = JSON.parse(q.doc as string);
      return { problems: validate(v), wire: JSON.stringify(v) };
    }
    case "ack":
      return { event: JSON.stringify(ackEvent(JSON.parse(q.wake as string), q.source as string, q.agent as string, new Date(q.at as number))) };
    case "received":
      return { ageMs: staleAge(JSON.parse(q.wake as string).agent_tree_snapshot, q.now as number) };
  }
  throw new Error(`probe: no op ${String(q.op)}`);
}

const out: string[] = [];
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  out.push(JSON.stringify(answer(JSON.parse(line))));
  if (out.length >= 512) process.stdout.write(out.splice(0).join("\n") + "\n");
}).on("close", () => {
  if (out.length) process.stdout.write(out.join("\n") + "\n");
});
