import type { Problem } from "./validate";

/** CanopyError is the base of every error the package throws. */
export class CanopyError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * ValidationError says an event is not what canopy's contract (the JSON
 * Schemas of schema/events) allows: nothing was sent. problems lists every
 * problem, each with where it is (data.role, time, ...).
 */
export class ValidationError extends CanopyError {
  constructor(
    /** The event's id and type, as far as it has them. */
    readonly event: { readonly id?: unknown; readonly type?: unknown },
    /** Every problem of the event. */
    readonly problems: readonly Problem[],
  ) {
    super(`canopy: invalid ${typeof event.type === "string" ? event.type : "event"}${typeof event.id === "string" ? " " + event.id : ""}: ` +
      problems.map((p) => `${p.path}: ${p.message}`).join("; "));
  }
}

/**
 * DeliveryError says Kafka did not take events: code is what it refused
 * them with (a Kafka error code name such as MESSAGE_TOO_LARGE,
 * UNKNOWN_TOPIC_OR_PARTITION or TOPIC_AUTHORIZATION_FAILED), or the
 * client's failure (KafkaJSConnectionError, ...) when no broker answered.
 * None, some or all of the events may have been written: sending the same
 * events again is safe, since canopy applies an event id once.
 */
export class DeliveryError extends CanopyError {
  constructor(
    message: string,
    /** The topic the events were for. */
    readonly topic: string,
    /** The ids of the events not known to be written. */
    readonly eventIds: readonly string[],
    /** The Kafka error code's name, or the client error's name. */
    readonly code: string,
    /** Whether Kafka said retrying may succeed. */
    readonly retriable: boolean,
    cause: unknown,
  ) {
    super(message, { cause });
  }
}

/** HandlerError says a Conductor's handler failed: its wake was neither acknowledged nor committed. */
export class HandlerError extends CanopyError {
  constructor(
    /** The wake the handler failed on. */
    readonly wakeId: string,
    /** Its run. */
    readonly runId: string,
    cause: unknown,
  ) {
    super(`canopy: the handler failed on wake ${wakeId} of run ${runId}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

/** ConfigError lists every problem of a Producer's or a Conductor's options. */
export class ConfigError extends CanopyError {
  constructor(readonly problems: readonly string[]) {
    super(`canopy: ${problems.join("; ")}`);
  }
}
