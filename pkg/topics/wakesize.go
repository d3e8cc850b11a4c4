package topics

import (
	"math"
	"strings"
	"sync"
)

// The widest wake encodings the contract's limits allow. A projector bounds
// each wake it publishes in bytes (docs/CONTRACT.md "Wake size"): it can do
// so before building a wake, and check its settings at start, only with an
// upper bound of what each of a wake's pieces can take. Both bounds are
// computed by encoding the widest value the decoder's limits
// (MaxIDLength, MaxInputTextLength, the enums) let through, so that they
// follow the limits and the encoder wherever either goes.

// widestRune is a character whose JSON escape is the longest any character
// takes as Marshal writes strings: 6 bytes (\u0000), as for every control
// character and U+2028 and U+2029, and more than the 4 bytes of the widest
// UTF-8 sequence. A string of n of them bounds every string of n
// characters, and of n bytes (each invalid byte becomes a 6-byte \ufffd).
const widestRune = "\x00"

// widestID is an id at its longest with every character at its widest.
func widestID() string { return strings.Repeat(widestRune, MaxIDLength) }

// longest returns the longest of vs.
func longest[S ~string](vs []S) S {
	var w S
	for _, v := range vs {
		if len(v) > len(w) {
			w = v
		}
	}
	return w
}

// widestTrigger is a trigger with every field set and at its widest: the
// longest kind and input kind, every id at MaxIDLength and an input text at
// MaxInputTextLength, all of characters at their widest escape.
func widestTrigger() Trigger {
	id := widestID()
	return Trigger{
		Kind: longest(TriggerKinds), EventID: &id, AgentID: id, CorrelationID: &id,
		At: UnixMilliTime(0), Detail: &id,
		Input: &TriggerInput{InputKind: longest(InputKinds), Text: strings.Repeat(widestRune, MaxInputTextLength), ContentRef: id},
	}
}

// ulidLength is the length of a ULID's string: every wake id is one.
const ulidLength = 26

var (
	maxTriggerBytes = sync.OnceValue(func() int {
		t := widestTrigger()
		b, _ := t.AppendJSON(nil) // a trigger at 1970 always encodes
		return len(b)
	})
	maxEnvelopeBytes = sync.OnceValue(func() int {
		w := Wake{
			WakeID: strings.Repeat("0", ulidLength), SchemaVersion: WakeSchemaVersion, RunID: widestID(),
			Lane: longest([]Lane{LaneNormal, LanePriority}), Part: &WakePart{Number: math.MaxInt, Count: math.MaxInt},
			Triggers: []Trigger{},
		}
		b, _ := AppendWakeJSON(nil, &w, []byte{}) // an empty snapshot: the envelope alone
		return len(b)
	})
)

// MaxTriggerJSONBytes is the most bytes one trigger of a wake can take in
// the wake's encoding, whatever the events that raised it, as long as they
// passed the decoder: a human input trigger with every id at MaxIDLength,
// its text at MaxInputTextLength and every character escaped at its widest.
func MaxTriggerJSONBytes() int { return maxTriggerBytes() }

// MaxWakeEnvelopeJSONBytes is the most bytes a wake of canopy's takes
// besides its triggers (and the commas between them) and its snapshot: the
// wake id (a ULID), the schema version, the run id at its widest, the lane
// and a part object with the widest numbers. A wake of n triggers whose
// encodings take t bytes and of a snapshot of s bytes is at most
// MaxWakeEnvelopeJSONBytes() + t + (n-1) + s bytes.
func MaxWakeEnvelopeJSONBytes() int { return maxEnvelopeBytes() }

// MaxAckAgents is the most agents one conductor.wake_received names
// (data.agent_ids): a wake names at most this many distinct agents in its
// acknowledged triggers (Acknowledged), so that one acknowledgement always
// covers it; a projector splits a run's triggers that would name more.
const MaxAckAgents = maxListLength

// Acknowledged says whether a conductor's acknowledgement of a wake names
// the agent of a trigger of kind k: a result or a completion, which the
// delivery watchdog waits to see forwarded.
func (k TriggerKind) Acknowledged() bool { return k == TriggerResult || k == TriggerCompleted }
