import { CompressionCodecs, CompressionTypes, Kafka, type KafkaConfig, logLevel, type ProducerConfig } from "kafkajs";
import { partition } from "./partition";

// canopy's projectors write with franz-go's default compression, snappy,
// which kafkajs reads only with a codec registered (kafkajs-snappy, pure
// JavaScript; it has no type declarations).
// eslint-disable-next-line @typescript-eslint/no-require-imports
CompressionCodecs[CompressionTypes.Snappy] = require("kafkajs-snappy");

/** DEFAULT_PREFIX is the prefix of canopy's topic names: canopy.agent-events.v1, canopy.wakes.v1, ... */
export const DEFAULT_PREFIX = "canopy";
/** TOPICS_VERSION is the version in canopy's topic names. */
export const TOPICS_VERSION = 1;

/** topicNames returns canopy's topic names with prefix (docs/CONTRACT.md "Topics"). */
export function topicNames(prefix = DEFAULT_PREFIX): { agentEvents: string; humanInput: string; wakes: string; priorityWakes: string } {
  return {
    agentEvents: `${prefix}.agent-events.v${TOPICS_VERSION}`,
    humanInput: `${prefix}.human-input.v${TOPICS_VERSION}`,
    wakes: `${prefix}.wakes.v${TOPICS_VERSION}`,
    priorityWakes: `${prefix}.wakes-priority.v${TOPICS_VERSION}`,
  };
}

/**
 * Logger takes the package's log lines (and kafkajs's): a message and
 * fields, metadata only (never node contents or event data). console
 * fits.
 */
export interface Logger {
  debug?(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** stderrLogger writes warnings and errors as JSON lines to stderr: the default Logger. */
export const stderrLogger: Logger = {
  info() {},
  warn: (message, fields) => process.stderr.write(JSON.stringify({ level: "warn", msg: message, ...fields }) + "\n"),
  error: (message, fields) => process.stderr.write(JSON.stringify({ level: "error", msg: message, ...fields }) + "\n"),
};

/** newKafka is a kafkajs client on brokers, logging to logger. */
export function newKafka(brokers: string | readonly string[], clientId: string, logger: Logger, config?: Partial<KafkaConfig>): Kafka {
  const list = typeof brokers === "string" ? brokers.split(",").map((b) => b.trim()).filter(Boolean) : [...brokers];
  return new Kafka({
    clientId,
    brokers: list,
    logLevel: logLevel.WARN,
    logCreator: () => ({ level, log }) => {
      const { message, ...fields } = log;
      if (level <= logLevel.ERROR) logger.error(`kafkajs: ${message}`, fields);
      else if (level === logLevel.WARN) logger.warn(`kafkajs: ${message}`, fields);
      else if (level === logLevel.INFO) logger.info(`kafkajs: ${message}`, fields);
      else logger.debug?.(`kafkajs: ${message}`, fields);
    },
    ...config,
  });
}

/**
 * producerConfig is how the package produces: keyed records placed by
 * partition() (murmur2, as canopy), never creating a topic (canopy's topics
 * are created with the partition count every projector agrees on), one
 * request in flight per broker so that a retry keeps a run's order (a
 * duplicate it makes has the same event id, which canopy applies once).
 */
export function producerConfig(extra?: Partial<ProducerConfig>): ProducerConfig {
  return {
    allowAutoTopicCreation: false,
    maxInFlightRequests: 1,
    idempotent: false,
    ...extra,
    createPartitioner: () => ({ partitionMetadata, message }) => partition(message.key ?? "", partitionMetadata.length),
  };
}
