// Package topics is canopy's wire contract: the names and settings of every
// topic, how records are keyed and partitioned, the headers they carry, and the
// typed messages that travel on them — the CloudEvents envelope of an agent
// event with its payloads, the wake message, and the agent_tree_snapshot of
// seed 000.
//
// Everything here is plain data and codecs. Producers in any language can
// write the same bytes from the JSON Schema files under schema/; this package
// is what Go producers, the projector and Go conductors import so that they
// agree with those schemas by construction (a test keeps the two in step).
//
// Decoding is strict: an unknown payload field, a missing required field, a
// value outside its enum, or a run id that disagrees with the record key is an
// error that names the field and the problem, so a producer bug is found at the
// first record rather than as a wrong snapshot later.
package topics
