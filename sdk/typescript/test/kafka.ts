// Kafka helpers of the broker suites, on kafkajs directly (not the package
// under test).
import { Kafka, logLevel, type ITopicConfig, type KafkaMessage } from "kafkajs";
import { brokers, waitFor } from "./helpers";

export const kafka = new Kafka({ clientId: "canopy-sdk-test", brokers: brokers.split(",").filter(Boolean), logLevel: logLevel.NOTHING });

/** createTopics creates topics, waiting until their metadata is there. */
export async function createTopics(topics: ITopicConfig[]): Promise<void> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics, waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
}

/** readAll reads topic from its start until n messages (read_committed), failing after 30 s. */
export async function readAll(topic: string, n: number): Promise<{ partition: number; message: KafkaMessage }[]> {
  const out: { partition: number; message: KafkaMessage }[] = [];
  const c = kafka.consumer({ groupId: `reader-${topic}-${Math.random().toString(36).slice(2)}`, maxWaitTimeInMs: 100 });
  await c.connect();
  try {
    await c.subscribe({ topics: [topic], fromBeginning: true });
    await c.run({ eachMessage: async ({ partition, message }) => void out.push({ partition, message }) });
    await waitFor(`${n} messages of ${topic}`, () => out.length >= n);
  } finally {
    await c.disconnect();
  }
  return out;
}

/** endOffsets sums a topic's end offsets. */
export async function endOffsets(topic: string): Promise<number> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    return (await admin.fetchTopicOffsets(topic)).reduce((n, p) => n + Number(p.high), 0);
  } finally {
    await admin.disconnect();
  }
}

/** committed returns a group's committed offsets of topic by partition (-1: none). */
export async function committed(groupId: string, topic: string): Promise<Map<number, number>> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const [t] = await admin.fetchOffsets({ groupId, topics: [topic] });
    return new Map((t?.partitions ?? []).map((p) => [p.partition, Number(p.offset)]));
  } finally {
    await admin.disconnect();
  }
}
