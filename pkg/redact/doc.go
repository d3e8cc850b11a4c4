// Package redact takes secrets out of the free text of canopy's events
// before anything is made of them: a Policy rewrites an event's free-text
// fields (topics.FreeTextFields: a human's input, a turn's summary, a
// command line, an incident's or a session's title) and the data fields an
// operator names, in place, so that the state, the wakes and their trigger
// texts, the read model, history, the live view, logs and OpenTelemetry
// records only ever see the rewritten text. docs/CONTRACT.md "Redaction"
// is the contract: what is redacted, where, and what is not.
//
// A Policy runs, in a fixed order, the built-in rules (BuiltinRules: bearer
// tokens, the major providers' API keys, private keys, passwords in URLs
// and in assignments, JWTs), then the operator's pattern rules in the order
// given; an operator's field rule replaces a field's whole value instead.
// Each match becomes "[redacted:<rule>]", so that a reader knows what was
// there and nothing of it. The result is a pure function of the text and
// the policy (no randomness, no clock, no map order): the same input log
// gives the same state and wake ids on any instance with the same policy.
// It is idempotent (redacting twice is redacting once), so that text the
// gateway redacted passes the projector's policy unchanged, and it keeps
// each field within its contract limit, so that a redacted event still
// decodes.
//
// It is a pkg/ package rather than internal/ so that producers can redact
// at the source with the very rules canopy applies (examples/producer-go
// imports only pkg/).
//
// Text with no candidate for any rule costs one scan per rule for a short
// literal (strings.Contains) and no allocation: the regular expressions run
// only on text that holds a rule's anchor.
package redact
