import type { CompressionTypes, IHeaders, KafkaConfig, Producer as KafkaProducer, ProducerConfig } from "kafkajs";
import { CONTENT_TYPE, type Event, withSource } from "./event";
import type { EventType } from "./events";
import { ConfigError, DeliveryError, ValidationError } from "./errors";
import { DEFAULT_PREFIX, type Logger, newKafka, producerConfig, stderrLogger, topicNames } from "./kafka";
import { validate } from "./validation";
import * as builders from "./events";

/** ProducerOptions are a Producer's options; each but source has a default. */
export interface ProducerOptions {
  /**
   * Names this producer, a URI-reference such as /apps/my-agents: the
   * source of the events it sends that were built without one.
   */
  source: string;
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
  /**
   * The topic: default the agent events topic; humanInputTopic for a
   * human's signal.input (canopy wakes the conductor on its priority lane).
   */
  topic?: string;
}

const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/**
 * Producer sends canopy events to the agent events topic: each validated
 * against the contract first (nothing of a send is sent if any event is
 * invalid), keyed by its run id, in the partition canopy keeps the run in
 * (murmur2 of the run id, whatever kafkajs's default), with the CloudEvents
 * content type. It connects on first use; close it when done.
 */
export class Producer {
  /** The topic events go to: <prefix>.agent-events.v1. */
  readonly topic: string;
  /** The human input topic, <prefix>.human-input.v1, for SendOptions.topic. */
  readonly humanInputTopic: string;
  /** The source of the events sent without one. */
  readonly source: string;
  private readonly producer: KafkaProducer;
  private readonly compression?: CompressionTypes;
  private connecting?: Promise<void>;
  private readonly inFlight = new Set<Promise<unknown>>();
  private closed = false;

  /** A Producer on brokers ("host:port,host:port" or a list); it throws a ConfigError listing every problem of its options. */
  constructor(brokers: string | readonly string[], options: ProducerOptions) {
    const problems: string[] = [];
    if ((typeof brokers === "string" ? brokers.split(",") : brokers).every((b) => !b.trim())) problems.push("no brokers");
    if (!options?.source) problems.push("source: must not be empty (it names this producer, e.g. /apps/my-agents)");
    else {
      const bad = validate(builders.signalHeartbeat({ runId: "probe", agentId: "probe", source: options.source, time: new Date(0) }))
        .filter((p) => p.path === "source");
      problems.push(...bad.map((p) => `source ${p.message}`));
    }
    if (options?.prefix !== undefined && !/^[A-Za-z0-9._-]+$/.test(options.prefix)) problems.push(`prefix ${JSON.stringify(options.prefix)}: want letters, digits, ".", "_" or "-"`);
    if (problems.length) throw new ConfigError(problems);
    const names = topicNames(options.prefix ?? DEFAULT_PREFIX);
    this.topic = names.agentEvents;
    this.humanInputTopic = names.humanInput;
    this.source = options.source;
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
   * send validates events and writes them, resolving, once Kafka has them
   * all (acks from every in-sync replica), to the events as sent (with this
   * producer's source if they had none). It throws ValidationError, sending
   * nothing, if any event is invalid, and DeliveryError naming what Kafka
   * refused if it did not take them. A retry of the same events is safe:
   * their ids are the same, and canopy applies an id once.
   */
  send<T extends EventType>(event: Event<T>, options?: SendOptions): Promise<Event<T>>;
  send(events: readonly Event[], options?: SendOptions): Promise<Event[]>;
  async send(events: Event | readonly Event[], options: SendOptions = {}): Promise<Event | Event[]> {
    const one = !Array.isArray(events);
    const list = (one ? [events as Event] : (events as readonly Event[])).map((ev) => withSource(ev, this.source));
    for (const ev of list) {
      const problems = validate(ev);
      if (problems.length) throw new ValidationError({ id: ev?.id, type: ev?.type }, problems);
    }
    if (options.traceparent !== undefined && !TRACEPARENT.test(options.traceparent)) {
      throw new TypeError(`canopy: traceparent ${JSON.stringify(options.traceparent)} is not a W3C trace context (00-<32 hex>-<16 hex>-<2 hex>)`);
    }
    if (list.length === 0) return [];
    const topic = options.topic ?? this.topic;
    const headers: IHeaders = { "content-type": CONTENT_TYPE };
    if (options.traceparent) headers.traceparent = options.traceparent;
    const messages = list.map((ev) => ({ key: ev.runid, value: JSON.stringify(ev), headers }));
    const p = (async () => {
      try {
        await this.connectOnce();
        await this.producer.send({ topic, messages, compression: this.compression, acks: -1 });
        return one ? list[0] : list;
      } catch (e) {
        throw e instanceof DeliveryError ? e : deliveryError(e, topic, list.map((ev) => ev.id));
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
