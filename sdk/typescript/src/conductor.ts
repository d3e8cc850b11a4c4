import type { Admin, Consumer, ConsumerConfig, KafkaConfig, KafkaMessage, Producer as KafkaProducer } from "kafkajs";
import { ConfigError, HandlerError } from "./errors";
import { DEFAULT_PREFIX, type Logger, newKafka, producerConfig, stderrLogger, topicNames } from "./kafka";
import { conductorWakeReceived } from "./events";
import { deliveryError } from "./producer";
import { validate } from "./validation";
import { ackEvent, ackHeaders, decodeWake, type Received, staleAge } from "./wake";
import type { Wake } from "./wakes";

/**
 * Handler handles one wake. received is its metadata at receipt
 * (staleness included). signal is aborted when the conductor stops: a
 * handler that gives up then (throws) has its wake neither acknowledged nor
 * committed, so it is delivered again after a restart. Any other throw
 * stops the conductor: run rejects with a HandlerError, and the wake is
 * neither acknowledged nor committed.
 */
export type Handler = (wake: Wake, received: Received, signal: AbortSignal) => void | Promise<void>;

/** ConductorOptions are a Conductor's options; each has a default. */
export interface ConductorOptions {
  /**
   * The consumer group of the normal lane; the priority lane's is the same
   * with "-priority" appended. Default "canopy-conductor".
   */
  group?: string;
  /** The prefix of canopy's topic names. Default "canopy". */
  prefix?: string;
  /** The source of the acknowledgements. Default "/conductors/<group>". */
  source?: string;
  /** The agent an acknowledgement is about when the snapshot has no root. Default "conductor". */
  agentId?: string;
  /** A snapshot older than this at receipt is stale (seed 000). Default 10000 ms. */
  staleAfterMs?: number;
  /** How many recent wake ids duplicates are dropped among. Default 10000. */
  dedupeSize?: number;
  /**
   * How long normal wakes wait, after the priority lane's partitions are
   * assigned, for the priority backlog listed then to arrive. It is only
   * reached when that backlog cannot be fetched. Default 5000 ms.
   */
  priorityWaitMs?: number;
  /** Acknowledge each wake with conductor.wake_received. Default true. */
  ack?: boolean;
  /** The clock staleness is measured on and acknowledgements are timed with (Unix ms). Default Date.now. */
  now?: () => number;
  /** The Kafka client id. Default "canopy-conductor". */
  clientId?: string;
  /** Where the conductor and kafkajs log (one info line per wake). Default: warnings and errors to stderr. */
  logger?: Logger;
  /** kafkajs client settings (ssl, sasl, retry, timeouts) over the package's. */
  kafka?: Partial<KafkaConfig>;
  /** kafkajs consumer settings over the package's (not the group id). */
  consumer?: Partial<ConsumerConfig>;
}

/** ConductorStats count what a Conductor did. */
export interface ConductorStats {
  /** Wakes that went to the handler. */
  delivered: number;
  /** Wakes dropped as duplicates (a wake_id seen before). */
  duplicates: number;
  /** Records skipped because they are not wakes. */
  undecodable: number;
  /** Wakes acknowledged with conductor.wake_received. */
  acked: number;
}

/**
 * Conductor consumes a conductor's wakes with pkg/wake's semantics, on
 * kafkajs:
 *   - priority wakes first: the priority backlog listed when the priority
 *     lane's partitions are assigned, and every priority wake fetched
 *     since, goes before the next normal wake;
 *   - read_committed (wakes of aborted projector transactions are never
 *     seen); duplicates dropped by wake_id among the last dedupeSize;
 *   - staleness recomputed at receipt (Received.stale, ageMs);
 *   - after the handler returns, a conductor.wake_received acknowledgement
 *     to the agent events topic, keyed by run and placed by murmur2, naming
 *     the agents whose results or completions the wake delivered; only once
 *     Kafka has it is the wake's offset committed.
 * One wake is handled at a time. Delivery is at least once across restarts
 * and exactly once within a process. Each lane is a consumer (and group) of
 * its own, so that a priority wake fetched while a normal one is handled is
 * the next one handled.
 */
export class Conductor {
  /** Live counters. */
  readonly stats: ConductorStats = { delivered: 0, duplicates: 0, undecodable: 0, acked: 0 };
  private readonly opts: Required<Pick<ConductorOptions, "group" | "source" | "agentId" | "staleAfterMs" | "dedupeSize" | "priorityWaitMs" | "ack" | "now">>;
  private readonly logger: Logger;
  private readonly topics: ReturnType<typeof topicNames>;
  private readonly prio: Consumer;
  private readonly normal: Consumer;
  private readonly admin: Admin;
  private readonly acks: KafkaProducer;
  private readonly turns = new Turns();
  private readonly seen = new Set<string>(); // recent wake ids, oldest first
  private readonly abort = new AbortController();
  private handler?: Handler;
  private started = false;
  private stopping = false;
  private failure?: unknown;
  private finished?: Promise<void>;
  private starting?: Promise<void>;
  private finish?: (err?: unknown) => void;
  // The priority backlog: partition -> the offset it ends at, while not fetched.
  private readonly backlog = new Map<number, bigint>();
  private readonly fetchedTo = new Map<number, bigint>();
  private backlogTimer?: NodeJS.Timeout;
  private backlogRelease?: () => void;
  private initialRelease?: () => void;
  private assignments = 0;

  /** A Conductor on brokers ("host:port,host:port" or a list). */
  constructor(brokers: string | readonly string[], options: ConductorOptions = {}) {
    const group = options.group ?? "canopy-conductor";
    const problems: string[] = [];
    if ((typeof brokers === "string" ? brokers.split(",") : brokers).every((b) => !b.trim())) problems.push("no brokers");
    if (group === "") problems.push("group: empty");
    if (options.prefix !== undefined && !/^[A-Za-z0-9._-]+$/.test(options.prefix)) problems.push(`prefix ${JSON.stringify(options.prefix)}: want letters, digits, ".", "_" or "-"`);
    for (const k of ["staleAfterMs", "priorityWaitMs"] as const) {
      const v = options[k];
      if (v !== undefined && !(Number.isFinite(v) && v >= 0)) problems.push(`${k} ${v}: must be a number of milliseconds, not negative`);
    }
    if (options.dedupeSize !== undefined && !(Number.isInteger(options.dedupeSize) && options.dedupeSize > 0)) {
      problems.push(`dedupeSize ${options.dedupeSize}: must be a positive integer`);
    }
    // The acknowledgement is an event: its source and agent must pass the contract.
    const probe = validate(conductorWakeReceived({ runId: "probe", agentId: options.agentId ?? "conductor", wakeId: "probe",
      source: options.source ?? `/conductors/${group}`, time: new Date(0) }));
    problems.push(...probe.map((p) => `${p.path === "agentid" ? "agentId" : "source"}: ${p.message}`));
    if (problems.length) throw new ConfigError(problems);
    this.opts = {
      group,
      source: options.source ?? `/conductors/${group}`,
      agentId: options.agentId ?? "conductor",
      staleAfterMs: options.staleAfterMs ?? 10_000,
      dedupeSize: options.dedupeSize ?? 10_000,
      priorityWaitMs: options.priorityWaitMs ?? 5_000,
      ack: options.ack ?? true,
      now: options.now ?? Date.now,
    };
    this.logger = options.logger ?? stderrLogger;
    this.topics = topicNames(options.prefix ?? DEFAULT_PREFIX);
    const kafka = newKafka(brokers, options.clientId ?? "canopy-conductor", this.logger, options.kafka);
    // Short fetch waits: a new wake is seen within 100 ms.
    const consumer = (groupId: string) => kafka.consumer({ maxWaitTimeInMs: 100, allowAutoTopicCreation: false, ...options.consumer, groupId, readUncommitted: false });
    this.prio = consumer(`${group}-priority`);
    this.normal = consumer(group);
    this.admin = kafka.admin();
    this.acks = kafka.producer(producerConfig());
  }

  /**
   * run delivers wakes to handler until stop is called (then it resolves,
   * with what was handled committed), the handler fails (HandlerError), an
   * acknowledgement is refused (DeliveryError), or Kafka fails in a way
   * kafkajs does not retry. A Conductor runs once.
   */
  run(handler: Handler): Promise<void> {
    if (this.started) return Promise.reject(new Error("canopy: a Conductor runs once"));
    this.started = true;
    this.handler = handler;
    this.finished = new Promise<void>((resolve, reject) => {
      this.finish = (err?: unknown) => (err === undefined ? resolve() : reject(err));
    });
    this.starting = this.start();
    this.starting.catch((e: unknown) => this.fail(e));
    return this.finished;
  }

  /** stop stops run: it waits for the wake being handled (its signal aborted), then leaves the groups. */
  async stop(): Promise<void> {
    if (!this.started) return;
    void this.shutdown();
    await this.finished?.catch(() => undefined);
  }

  private async start(): Promise<void> {
    // Normal wakes wait for the priority lane's first assignment and its backlog.
    this.initialRelease = this.turns.hold();
    await this.acks.connect();
    await this.admin.connect();
    this.prio.on(this.prio.events.GROUP_JOIN, (e) => {
      this.fetchedTo.clear(); // what is fetched from now on is of this assignment
      void this.priorityAssigned(e.payload.memberAssignment[this.topics.priorityWakes] ?? []);
    });
    // A batch of transaction markers only: kafkajs does not hand it over, but it was fetched.
    this.prio.on(this.prio.events.START_BATCH_PROCESS, (e) => {
      if (e.payload.batchSize === 0) this.fetched(e.payload.partition, BigInt(e.payload.lastOffset) + 1n);
    });
    for (const c of [this.prio, this.normal]) {
      c.on(c.events.CRASH, (e) => {
        if (!e.payload.restart) this.fail(e.payload.error);
      });
    }
    if (this.stopping) return;
    await this.prio.connect();
    await this.prio.subscribe({ topics: [this.topics.priorityWakes], fromBeginning: true });
    if (this.stopping) return;
    // Whole batches, every partition's at once: what is fetched is known to be waiting (Turns).
    await this.prio.run({
      autoCommit: false, eachBatchAutoResolve: false, partitionsConsumedConcurrently: 64,
      eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
        let left = batch.messages.length;
        this.turns.expect(left);
        this.fetched(batch.partition, BigInt(batch.lastOffset()) + 1n);
        try {
          for (const m of batch.messages) {
            if (!isRunning() || isStale() || this.stopping) break; // stopping, or the partition moved: leave the rest
            left--; // its turn's release counts it handled
            await this.handle(this.prio, true, batch.topic, batch.partition, m, heartbeat);
            if (this.stopping) break;
            resolveOffset(m.offset);
          }
        } finally {
          this.turns.expect(-left);
        }
      },
    });
    if (this.stopping) return;
    await this.normal.connect();
    await this.normal.subscribe({ topics: [this.topics.wakes], fromBeginning: true });
    if (this.stopping) return;
    await this.normal.run({
      autoCommit: false,
      eachMessage: ({ topic, partition, message, heartbeat }) => this.handle(this.normal, false, topic, partition, message, heartbeat),
    });
  }

  // priorityAssigned lists the backlog of the priority partitions just
  // assigned (committed, not yet fetched) and holds normal wakes until it
  // is fetched, or for priorityWaitMs at most.
  private async priorityAssigned(parts: number[]): Promise<void> {
    const release = this.turns.hold();
    const gen = ++this.assignments;
    this.initialRelease?.();
    this.initialRelease = undefined;
    this.clearBacklog();
    try {
      const topic = this.topics.priorityWakes;
      const [ends, committed] = await Promise.all([this.admin.fetchTopicOffsets(topic), // last stable offsets (read_committed)
        this.admin.fetchOffsets({ groupId: `${this.opts.group}-priority`, topics: [topic] })]);
      if (gen !== this.assignments) return release(); // a newer assignment took over
      const done = new Map((committed[0]?.partitions ?? []).map((p) => [p.partition, BigInt(p.offset)]));
      for (const p of parts) {
        const e = ends.find((x) => x.partition === p);
        if (!e) continue;
        let from = BigInt(e.low);
        for (const o of [done.get(p), this.fetchedTo.get(p)]) if (o !== undefined && o > from) from = o;
        if (BigInt(e.high) > from) this.backlog.set(p, BigInt(e.high));
      }
    } catch (err) {
      this.logger.warn("canopy: cannot list the priority backlog; priority wakes go first as they are fetched", { err: String(err) });
    }
    if (this.backlog.size === 0) return release();
    this.backlogRelease = release;
    this.backlogTimer = setTimeout(() => {
      this.logger.warn("canopy: the priority backlog did not arrive within the priority wait; delivering normal wakes",
        { partitions: this.backlog.size, priority_wait_ms: this.opts.priorityWaitMs });
      this.clearBacklog();
    }, this.opts.priorityWaitMs);
  }

  // fetched notes that priority partition p was fetched up to offset next.
  private fetched(p: number, next: bigint): void {
    const had = this.fetchedTo.get(p);
    if (had === undefined || next > had) this.fetchedTo.set(p, next);
    const end = this.backlog.get(p);
    if (end !== undefined && next >= end) {
      this.backlog.delete(p);
      if (this.backlog.size === 0) this.clearBacklog();
    }
  }

  private clearBacklog(): void {
    this.backlog.clear();
    clearTimeout(this.backlogTimer);
    this.backlogRelease?.();
    this.backlogRelease = undefined;
  }

  // handle handles one wake record in its turn: decode, dedupe, handler,
  // acknowledgement, commit. A failure stops the conductor.
  private async handle(consumer: Consumer, priority: boolean, topic: string, partition: number, message: KafkaMessage,
    heartbeat: () => Promise<void>): Promise<void> {
    const granted = await this.turns.take(priority);
    // A slow handler (a model call) must not cost the group membership.
    const beat = setInterval(() => heartbeat().catch(() => undefined), 1000);
    try {
      if (granted && !this.stopping) await this.deliver(consumer, topic, partition, message);
    } catch (e) {
      this.fail(e);
    } finally {
      clearInterval(beat);
      this.turns.release(priority, granted);
    }
  }

  private async deliver(consumer: Consumer, topic: string, partition: number, message: KafkaMessage): Promise<void> {
    const raw = message.value ?? Buffer.alloc(0);
    const where = { topic, partition, offset: message.offset };
    let w: Wake;
    try {
      w = decodeWake(raw);
    } catch (err) {
      this.stats.undecodable++;
      this.logger.warn("canopy: skipped an undecodable wake", { ...where, err: String(err) });
      return this.commit(consumer, topic, partition, message.offset);
    }
    if (this.seen.has(w.wake_id)) {
      this.stats.duplicates++;
      this.logger.debug?.("canopy: dropped a duplicate wake", { wake_id: w.wake_id, ...where });
      return this.commit(consumer, topic, partition, message.offset);
    }
    this.seen.add(w.wake_id);
    if (this.seen.size > this.opts.dedupeSize) this.seen.delete(this.seen.values().next().value as string);
    const r = this.received(w, topic, partition, message.offset, raw.length);
    this.stats.delivered++;
    this.logger.info("wake received", {
      wake_id: r.wakeId, run_id: r.runId, lane: r.lane, ...where, as_of_event_seq: r.asOfEventSeq, nodes_included: r.nodesIncluded,
      nodes_omitted: r.nodesOmitted, truncated: r.truncated, stale: r.stale, age_ms: r.ageMs, bytes: r.bytes,
      ...(r.part ? { part: r.part.number, parts: r.part.count } : {}),
    });
    try {
      await this.handler!(w, r, this.abort.signal);
    } catch (e) {
      if (this.stopping) return; // stopped mid-delivery: neither acknowledged nor committed, delivered again after a restart
      throw new HandlerError(w.wake_id, w.run_id, e);
    }
    if (this.opts.ack) {
      const ev = ackEvent(w, this.opts.source, this.opts.agentId, new Date(r.receivedAt));
      try {
        await this.acks.send({ topic: this.topics.agentEvents, acks: -1,
          messages: [{ key: ev.runid, value: JSON.stringify(ev), headers: ackHeaders }] });
      } catch (e) {
        throw deliveryError(e, this.topics.agentEvents, [ev.id]);
      }
      this.stats.acked++;
    }
    // Only now: the acknowledgement is in Kafka.
    await this.commit(consumer, topic, partition, message.offset);
  }

  private received(w: Wake, topic: string, partition: number, offset: string, bytes: number): Received {
    const s = w.agent_tree_snapshot;
    const now = this.opts.now();
    const ageMs = staleAge(s, now);
    return {
      wakeId: w.wake_id, snapshotId: s.snapshot_id, runId: w.run_id, lane: w.lane, topic, partition, offset,
      asOfEventSeq: s.as_of_event_seq, part: w.part, nodesIncluded: s.nodes.length,
      nodesOmitted: s.truncation_meta?.omitted_count_total ?? 0, bytes, truncated: s.truncated, stale: ageMs > this.opts.staleAfterMs, ageMs,
      triggers: w.triggers.map((t) => t.kind), receivedAt: new Date(now),
    };
  }

  // commit commits past offset. A partition that moved meanwhile cannot be
  // committed: its new owner delivers the wake again, and acknowledges it
  // with the same event id, which canopy applies once.
  private async commit(consumer: Consumer, topic: string, partition: number, offset: string): Promise<void> {
    try {
      await consumer.commitOffsets([{ topic, partition, offset: (BigInt(offset) + 1n).toString() }]);
    } catch (err) {
      this.logger.warn("canopy: cannot commit a handled wake's offset; it may be delivered again", { topic, partition, offset, err: String(err) });
    }
  }

  private fail(err: unknown): void {
    if (this.stopping) return; // what fails while stopping is the stopping's doing
    this.failure = err;
    void this.shutdown();
  }

  private async shutdown(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.abort.abort();
    this.clearBacklog();
    this.initialRelease?.();
    this.turns.close(); // waiting wakes return unhandled
    await this.turns.idle();
    await this.starting?.catch(() => undefined);
    // Leave the groups (kafkajs waits for the batch being processed).
    await Promise.allSettled([this.prio.disconnect(), this.normal.disconnect()]);
    await Promise.allSettled([this.acks.disconnect(), this.admin.disconnect()]);
    this.finish?.(this.failure);
  }
}

// Turns lets one wake be handled at a time, and a normal wake only when no
// priority wake is waiting: neither one whose handler asks for the turn,
// nor one kafkajs has fetched and not yet handed over (the rest of a
// priority batch, counted by expect), nor a priority backlog not yet
// fetched (a hold).
class Turns {
  private busy = false;
  private closed = false;
  private pendingPriority = 0;
  private holds = 0;
  private readonly waiting: { priority: ((granted: boolean) => void)[]; normal: ((granted: boolean) => void)[] } = { priority: [], normal: [] };
  private idlers: (() => void)[] = [];

  expect(n: number): void {
    this.pendingPriority += n;
    this.next();
  }

  /** hold keeps normal wakes waiting until the returned function is called. */
  hold(): () => void {
    this.holds++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.holds--;
      this.next();
    };
  }

  /** take resolves when it is the caller's turn (true), or when the turns are closed (false). */
  take(priority: boolean): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    return new Promise((resolve) => {
      this.waiting[priority ? "priority" : "normal"].push(resolve);
      this.next();
    });
  }

  /** release ends a turn take gave (granted), or accounts for one it did not. */
  release(priority: boolean, granted: boolean): void {
    if (granted) this.busy = false;
    if (priority) this.pendingPriority--;
    this.next();
  }

  /** close gives no more turns: the waiting get false. */
  close(): void {
    this.closed = true;
    for (const go of [...this.waiting.priority.splice(0), ...this.waiting.normal.splice(0)]) go(false);
    this.next();
  }

  idle(): Promise<void> {
    return this.busy ? new Promise((resolve) => this.idlers.push(resolve)) : Promise.resolve();
  }

  private next(): void {
    if (this.closed) {
      if (!this.busy) for (const f of this.idlers.splice(0)) f();
      return;
    }
    if (this.busy) return;
    const go = this.waiting.priority.shift() ?? (this.pendingPriority === 0 && this.holds === 0 ? this.waiting.normal.shift() : undefined);
    if (go) {
      this.busy = true;
      go(true);
    }
  }
}
