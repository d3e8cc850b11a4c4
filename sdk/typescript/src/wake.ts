import { CONTENT_TYPE, type Event } from "./event";
import { conductorWakeReceived } from "./events";
import { ulidTime, ackId } from "./ulid";
import type { AgentTreeSnapshot, Trigger, Wake, WakePart } from "./wakes";

/**
 * Received is what a conductor learns about a wake on receipt, as pkg/wake's
 * Received: metadata only, never node contents, so it may be logged.
 */
export interface Received {
  readonly wakeId: string;
  readonly snapshotId: string;
  readonly runId: string;
  readonly lane: Wake["lane"];
  /** The wake record's topic, partition and offset. */
  readonly topic: string;
  readonly partition: number;
  readonly offset: string;
  /** How many of the run's events the snapshot reflects. */
  readonly asOfEventSeq: number;
  /** The wake's part when its run's triggers were split over several wakes; each is a wake of its own. */
  readonly part?: WakePart;
  /** The snapshot's node counts, and the size of the wake record's value. */
  readonly nodesIncluded: number;
  readonly nodesOmitted: number;
  readonly bytes: number;
  readonly truncated: boolean;
  /**
   * Recomputed at receipt: ageMs is the snapshot's age when generated plus
   * the time since its generated_at, and stale is ageMs > the conductor's
   * staleAfterMs.
   */
  readonly stale: boolean;
  readonly ageMs: number;
  /** The kinds of the wake's triggers, in order. */
  readonly triggers: readonly Trigger["kind"][];
  /** When the wake was received (the conductor's clock). */
  readonly receivedAt: Date;
}

/**
 * staleAge is seed 000's snapshot age measured at now (Unix ms): the age
 * the projector measured when it built the snapshot plus the time since. A
 * clock behind the projector's does not make it younger.
 */
export function staleAge(s: Pick<AgentTreeSnapshot, "generated_at" | "snapshot_age_ms">, now: number): number {
  const at = Date.parse(s.generated_at);
  const since = Number.isNaN(at) ? 0 : Math.max(0, now - at);
  return (s.snapshot_age_ms || 0) + since;
}

/** ACK_TRIGGERS are the trigger kinds whose agents an acknowledgement names: their results were delivered. */
export const ACK_TRIGGERS: ReadonlySet<string> = new Set(["result", "status_completed"]);

/**
 * ackEvent is the conductor.wake_received event acknowledging wake at time
 * at, as pkg/wake.AckEvent makes it: from source, about the snapshot's root
 * agent (fallbackAgent when it has none), naming the agents of the wake's
 * result and status_completed triggers, in the snapshot's session and
 * thread. Its id comes from the wake id and the source, so acknowledging a
 * redelivered wake again is a duplicate canopy applies once.
 */
export function ackEvent(wake: Wake, source: string, fallbackAgent: string, at: Date): Event<"conductor.wake_received"> {
  const s = wake.agent_tree_snapshot;
  const agents: string[] = [];
  for (const t of wake.triggers) {
    if (ACK_TRIGGERS.has(t.kind) && !agents.includes(t.agent_id)) agents.push(t.agent_id);
  }
  const ms = ulidTime(wake.wake_id) ?? at.getTime(); // the wake's own time: the same id whenever it is acknowledged
  return conductorWakeReceived({
    id: ackId(ms, source, wake.wake_id),
    source,
    time: at,
    runId: wake.run_id,
    agentId: s.root_agent_id ?? fallbackAgent,
    sessionId: s.scope?.session_id ?? undefined,
    threadId: s.scope?.thread_id ?? undefined,
    wakeId: wake.wake_id,
    snapshotId: s.snapshot_id,
    agentIds: agents.length ? agents : undefined,
  });
}

/** WakeDecodeError says a wake record is not a wake. */
export class WakeDecodeError extends Error {}

/**
 * decodeWake parses a wake record's value, checking what a conductor relies
 * on (ids, lane, triggers, the snapshot): a wake canopy published passes;
 * fields a newer canopy adds are kept.
 */
export function decodeWake(value: Buffer | string): Wake {
  let w: unknown;
  try {
    w = JSON.parse(value.toString());
  } catch (e) {
    throw new WakeDecodeError(`not JSON: ${(e as Error).message}`);
  }
  const o = w as Partial<Wake> | null;
  const problems: string[] = [];
  const str = (v: unknown) => typeof v === "string" && v !== "";
  if (o === null || typeof o !== "object" || Array.isArray(o)) throw new WakeDecodeError("not a JSON object");
  if (!str(o.wake_id)) problems.push("wake_id");
  if (!str(o.run_id)) problems.push("run_id");
  if (o.lane !== "normal" && o.lane !== "priority") problems.push("lane");
  if (!Array.isArray(o.triggers) || !o.triggers.every((t) => t && typeof t === "object" && typeof t.kind === "string" && typeof t.agent_id === "string")) {
    problems.push("triggers");
  }
  const s = o.agent_tree_snapshot;
  if (!s || typeof s !== "object" || !str(s.snapshot_id) || !Array.isArray(s.nodes) || typeof s.generated_at !== "string") {
    problems.push("agent_tree_snapshot");
  }
  if (problems.length) throw new WakeDecodeError(`not a wake: missing or wrong ${problems.join(", ")}`);
  return o as Wake;
}

/** ackHeaders are the headers of an acknowledgement's record. */
export const ackHeaders = { "content-type": CONTENT_TYPE };
