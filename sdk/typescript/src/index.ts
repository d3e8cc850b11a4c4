// @canopy/agents: feed canopy from Node.
//
//   import { Producer, events } from "@canopy/agents";
//   const producer = new Producer("localhost:9092", { source: "/apps/my-agents" });
//   await producer.send(events.treeNodeCreated({ runId: "run-1", agentId: "planner", role: "conductor" }));
//
// events has a builder for every event type of the contract
// (schema/events); Producer validates, keys by run and partitions as canopy
// does; Conductor consumes wakes as pkg/wake does.

import * as events from "./events";

export { events };
export type { EventDataMap, EventType } from "./events";
export { BUILDERS, EVENT_TYPES, FIELDS } from "./events";
export { type Envelope, type Event, CONTENT_TYPE, DATA_CONTENT_TYPE, SPEC_VERSION, canonicalJSON, eventId, makeEvent, toTime, withSource } from "./event";
export { CONTRACT_SHA256, SCHEMA_VERSION, VERSION } from "./contract";
export { CanopyError, ConfigError, DeliveryError, HandlerError, ValidationError } from "./errors";
export { assertValid, validate } from "./validation";
export { type Problem, SchemaError, Validator } from "./validate";
export { SCHEMAS } from "./schemas";
export { murmur2, partition } from "./partition";
export { ackId, derive, ulid, ulidTime } from "./ulid";
export { DEFAULT_PREFIX, type Logger, TOPICS_VERSION, stderrLogger, topicNames } from "./kafka";
export { Producer, type ProducerOptions, type SendOptions } from "./producer";
export { Conductor, type ConductorOptions, type ConductorStats, type Handler } from "./conductor";
export { ACK_TRIGGERS, type Received, WakeDecodeError, ackEvent, decodeWake, staleAge } from "./wake";
export type { AgentTreeSnapshot, NodeDigest, StatusCounts, Summary, Trigger, TriggerInput, TruncationMeta, Wake, WakePart } from "./wakes";
