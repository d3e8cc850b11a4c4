import type { EventDataMap, EventType } from "./events";
import { derive } from "./ulid";

/** SPEC_VERSION is the CloudEvents version of every event. */
export const SPEC_VERSION = "1.0";
/** DATA_CONTENT_TYPE is the media type of every event's data. */
export const DATA_CONTENT_TYPE = "application/json";
/** CONTENT_TYPE is the content-type header of every record: a CloudEvent in structured mode. */
export const CONTENT_TYPE = "application/cloudevents+json";

/**
 * Envelope is what every builder of events.ts takes besides its payload's
 * fields: the CloudEvents attributes of docs/CONTRACT.md, in camelCase.
 * Optional ones left out are left out of the event (never sent as "").
 */
export interface Envelope {
  /** The run the event belongs to: the event's runid, and its record's Kafka key. */
  runId: string;
  /** The node of the run's agent tree the event is about (agentid). */
  agentId: string;
  /**
   * The producer, a URI-reference. Default: the source of the Producer
   * that sends the event (or /agents/<agentId> when it is serialised
   * without one). It is not part of the derived id.
   */
  source?: string;
  /**
   * When the event happened: a Date, or an RFC 3339 string (kept as
   * written). Default: now. canopy keeps it at millisecond precision, in
   * UTC.
   */
  time?: Date | string;
  /**
   * The event id. Default: eventId of the event's content, a ULID whose
   * time is the event's: building the same event again (same time, same
   * content, whatever the source) gives the same id, so a retry is a
   * duplicate canopy applies once.
   */
  id?: string;
  /** The session scope of the run (sessionid). */
  sessionId?: string;
  /** The thread scope of the run (threadid). */
  threadId?: string;
  /** Ties related events together: a delegation, a request and its answer (correlationid). */
  correlationId?: string;
  /** The id of the event that caused this one (causationid). */
  causationId?: string;
  /** The CloudEvents subject; not interpreted. */
  subject?: string;
  /** The CloudEvents dataschema, an absolute URI; not interpreted. */
  dataschema?: string;
}

/**
 * Event is one canopy event as it is sent: a CloudEvents 1.0 event in JSON
 * (JSON.stringify(event) is the record's value). Builders return it frozen:
 * its id was derived from this content.
 */
export interface Event<T extends EventType = EventType> {
  readonly specversion: "1.0";
  readonly id: string;
  readonly source: string;
  readonly type: T;
  readonly time: string;
  readonly datacontenttype: "application/json";
  readonly runid: string;
  readonly agentid: string;
  readonly schemaversion: 1;
  readonly sessionid?: string;
  readonly threadid?: string;
  readonly correlationid?: string;
  readonly causationid?: string;
  readonly subject?: string;
  readonly dataschema?: string;
  readonly data: EventDataMap[T];
}

/**
 * toTime formats a time as the contract's timestamps are written: a Date
 * as RFC 3339 in UTC with milliseconds (2026-02-14T10:00:00.000Z), a string
 * as it is (validation judges it).
 */
export function toTime(t: Date | string): string {
  if (typeof t === "string") return t;
  return Number.isNaN(t.getTime()) ? String(t) : t.toISOString();
}

/**
 * makeEvent builds an event of type from the envelope and the payload as
 * it is sent (the contract's snake_case fields): what every builder of
 * events.ts calls. Payload fields that are undefined are left out.
 */
export function makeEvent<T extends EventType>(type: T, env: Envelope, data: EventDataMap[T] | Record<string, unknown>): Event<T> {
  const d: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(data)) {
    if (v !== undefined) d[k] = Array.isArray(v) ? Object.freeze([...v]) : v;
  }
  const ev: Record<string, unknown> = {
    specversion: SPEC_VERSION,
    id: "",
    source: env.source ?? `/agents/${env.agentId}`, // until a Producer gives its own
    type,
    time: toTime(env.time ?? new Date()),
    datacontenttype: DATA_CONTENT_TYPE,
    runid: env.runId,
    agentid: env.agentId,
    schemaversion: 1,
  };
  const optional: [string, string | undefined][] = [["sessionid", env.sessionId], ["threadid", env.threadId],
    ["correlationid", env.correlationId], ["causationid", env.causationId], ["subject", env.subject], ["dataschema", env.dataschema]];
  for (const [k, v] of optional) {
    if (v !== undefined) ev[k] = v;
  }
  ev.data = Object.freeze(d);
  ev.id = env.id ?? eventId(ev);
  const out = Object.freeze(ev) as unknown as Event<T>;
  if (env.source === undefined) defaultSource.add(out);
  return out;
}

// defaultSource holds the events built without a source: a Producer sends
// them with its own.
const defaultSource = new WeakSet<object>();

/** withSource returns ev with source, if ev was built without one; its id stays (the source is not part of it). */
export function withSource<T extends EventType>(ev: Event<T>, source: string): Event<T> {
  if (!defaultSource.has(ev) || ev.source === source) return ev;
  return Object.freeze({ ...ev, source }) as Event<T>;
}

/**
 * eventId derives an event's id from its content, as the Python package
 * (canopy-agents) does: a ULID whose time is the event's milliseconds (0 if
 * its time does not parse) and whose entropy is pkg/ids.Derive's hash of
 * "canopy.event", its type, run, agent, time (in UTC at millisecond
 * precision), session, thread, correlation and causation ids ("" when
 * absent), its data as canonical JSON (keys sorted, no spaces), and its
 * subject and dataschema when it has either. Not its source. The same
 * content always gives the same id.
 */
export function eventId(ev: { readonly [k: string]: unknown }): string {
  const ms = typeof ev.time === "string" ? Date.parse(ev.time) : NaN;
  const ok = Number.isFinite(ms) && ms >= -62135596800000 && ms <= 253402300799999; // years 1 to 9999
  const s = (k: string) => (typeof ev[k] === "string" ? (ev[k] as string) : "");
  const parts = ["canopy.event", s("type"), s("runid"), s("agentid"), ok ? new Date(ms).toISOString() : s("time"),
    s("sessionid"), s("threadid"), s("correlationid"), s("causationid"), ev.data == null ? "" : canonicalJSON(ev.data)];
  if (ev.subject !== undefined || ev.dataschema !== undefined) parts.push(s("subject"), s("dataschema"));
  return derive(ok ? ms : 0, ...parts);
}

/** canonicalJSON is JSON.stringify with every object's keys sorted. */
export function canonicalJSON(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) => {
    if (x === null || typeof x !== "object" || Array.isArray(x)) return x;
    const o = x as Record<string, unknown>;
    return Object.fromEntries(Object.keys(o).sort().map((k) => [k, o[k]]));
  });
}
