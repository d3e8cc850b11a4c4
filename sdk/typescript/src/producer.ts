import type { CompressionTypes, IHeaders, KafkaConfig, Producer as KafkaProducer, ProducerConfig, RecordMetadata } from "kafkajs";
import { CONTENT_TYPE, type Event } from "./event";
import { ConfigError, DeliveryError, ValidationError } from "./errors";
import { DEFAULT_PREFIX, type Logger, newKafka, producerConfig, stderrLogger, topicNames } from "./kafka";
import { validate } from "./validation";

/** ProducerOptions are a Producer's options; each has a default. */
export interface ProducerOptions {
  /** The prefix of canopy's topic names: events go to <prefix>.agent-events.v1. Default "canopy". */
  prefix?: string;
  /** The Kafka client id. Default "canopy-agents". */
  clientId?: string;
  /** Compression of the records. Default none. */
  compression?: CompressionTypes;
  /** Where the package and kafkajs log. Default: warnings and errors to stderr, as JSON lines. */
  logger?: Logger;
  /** kafkajs client settings (ssl, sasl, retry, timeouts) over the package's. */
  kafka?: Partial<KafkaConfig>;
  /** kafkajs producer settings over the package's; the partitioner is always canopy's. */
  producer?: Partial<ProducerConfig>;
}

/** SendOptions are the options of one send. */
export interface SendOptions {
  /** A W3C traceparent for the records: the wakes the events raise continue that trace. */
  traceparent?: string;
}

/**
 * Producer sends canopy events to the agent events topic: each validated
 * against the contract first (nothing of a send is sent if any event is
 * invalid), keyed by its run id, in the partition canopy keeps the run in
 * (murmur2 of the run id, whatever kafkajs's default), with the CloudEvents
 * content type. It connects on first use; close it when done.
 */
export class Producer {
  /** The topic events go to. */
  readonly topic: string;
  private readonly producer: KafkaProducer;
  private readonly compression?: CompressionTypes;
  private connecting?: Promise<void>;
  private readonly inFlight = new Set<Promise<unknown>>();
  private closed = false;

  /** A Producer on brokers ("host:port,host:port" or a list). */
  constructor(brokers: string | readonly string[], options: ProducerOptions = {}) {
    const problems: string[] = [];
    if ((typeof brokers === "string" ? brokers.split(",") : brokers).every((b) => !b.trim())) problems.push("no brokers");
    if (options.prefix !== undefined && !/^[A-Za-z0-9._-]+$/.test(options.prefix)) problems.push(`prefix ${JSON.stringify(options.prefix)}: want letters, digits, ".", "_" or "-"`);
    if (problems.length) throw new ConfigError(problems);
    this.topic = topicNames(options.prefix ?? DEFAULT_PREFIX).agentEvents;
    this.compression = options.compression;
    const kafka = newKafka(brokers, options.clientId ?? "canopy-agents", options.logger ?? stderrLogger, options.kafka);
    this.producer = kafka.producer(producerConfig(options.producer));
  }

  /** connect connects to Kafka (a DeliveryError if it cannot); send does when needed. */
  async connect(): Promise<void> {
    try {
      await this.connectOnce();
    } catch (e) {
      throw e instanceof DeliveryError ? e : deliveryError(e, this.topic, []);
    }
  }

  private connectOnce(): Promise<void> {
    if (this.closed) return Promise.reject(Object.assign(new Error("the producer is closed"), { name: "CLOSED" }));
    this.connecting ??= this.producer.connect().catch((e: unknown) => {
      this.connecting = undefined;
      throw e;
    });
    return this.connecting;
  }

  /**
   * send validates events and writes them, resolving once Kafka has them
   * all (acks from every in-sync replica). It throws ValidationError,
   * sending nothing, if any event is invalid, and DeliveryError naming what
   * Kafka refused if it did not take them. A retry of the same events is
   * safe: their ids are the same, and canopy applies an id once.
   */
  async send(events: Event | readonly Event[], options: SendOptions = {}): Promise<RecordMetadata[]> {
    const list: readonly Event[] = Array.isArray(events) ? events : [events as Event];
    for (const ev of list) {
      const problems = validate(ev);
      if (problems.length) throw new ValidationError({ id: ev?.id, type: ev?.type }, problems);
    }
    if (list.length === 0) return [];
    const headers: IHeaders = { "content-type": CONTENT_TYPE };
    if (options.traceparent) headers.traceparent = options.traceparent;
    const messages = list.map((ev) => ({ key: ev.runid, value: JSON.stringify(ev), headers }));
    const p = (async () => {
      try {
        await this.connectOnce();
        return await this.producer.send({ topic: this.topic, messages, compression: this.compression, acks: -1 });
      } catch (e) {
        throw e instanceof DeliveryError ? e : deliveryError(e, this.topic, list.map((ev) => ev.id));
      }
    })();
    this.inFlight.add(p);
    try {
      return await p;
    } finally {
      this.inFlight.delete(p);
    }
  }

  /** flush resolves when every send begun before it has ended (kafkajs does not buffer: a send is in flight until Kafka answers). */
  async flush(): Promise<void> {
    await Promise.allSettled([...this.inFlight]);
  }

  /** close waits for the sends in flight and disconnects. */
  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
    if (this.connecting) {
      await this.connecting.catch(() => undefined);
      await this.producer.disconnect();
    }
  }
}

/**
 * deliveryError is the DeliveryError of a kafkajs failure: the Kafka error
 * code under its retries, or the client's error.
 */
export function deliveryError(e: unknown, topic: string, eventIds: readonly string[]): DeliveryError {
  let cause: unknown = e;
  // kafkajs wraps what the broker said in its retries' error.
  while (cause instanceof Error && cause.name === "KafkaJSNumberOfRetriesExceeded" && cause.cause) cause = cause.cause;
  if (cause instanceof Error && cause.name === "KafkaJSAggregateError" && Array.isArray((cause as { errors?: unknown[] }).errors)) {
    cause = (cause as unknown as { errors: unknown[] }).errors[0] ?? cause;
  }
  const err = cause as { name?: string; type?: string; message?: string; retriable?: boolean } | undefined;
  const code = err?.type ?? err?.name ?? "Error";
  const what = eventIds.length === 0 ? "nothing" : eventIds.length === 1 ? `event ${eventIds[0]}` : `${eventIds.length} events`;
  const msg = err?.type
    ? `canopy: Kafka refused ${eventIds.length ? what : "the connection"} for ${topic}: ${err.type} (${err.message})`
    : `canopy: ${eventIds.length ? what + " not delivered to" : "cannot reach Kafka for"} ${topic}: ${err?.name ?? "Error"}: ${err?.message ?? String(e)}`;
  return new DeliveryError(msg, topic, eventIds, code, err?.retriable ?? false, e);
}
