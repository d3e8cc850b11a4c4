package topics

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors callers branch on. Every decode error wraps exactly one.
var (
	// ErrInvalidEvent: the record is not a valid event of a known type. The
	// projector dead-letters it.
	ErrInvalidEvent = errors.New("topics: invalid event")
	// ErrUnknownType: a well-formed envelope whose type this build does not
	// know, most likely from a newer producer. The projector counts and skips it.
	ErrUnknownType = errors.New("topics: unknown event type")
	// ErrUnsupportedVersion: a schemaversion newer than this build speaks.
	ErrUnsupportedVersion = errors.New("topics: unsupported schema version")
	// ErrInvalidUTF8: an invalid event (it wraps ErrInvalidEvent) that has
	// a string, a ce_* header or a record key that is not valid UTF-8
	// (docs/CONTRACT.md "Text"). A DecodeError is one when a problem's text
	// starts with CodeInvalidUTF8.
	ErrInvalidUTF8 = fmt.Errorf("%w: text is not valid UTF-8 (%s)", ErrInvalidEvent, CodeInvalidUTF8)
)

// Problem is one thing wrong with a message: the field, in JSON path form
// ("data.expected_by"), and what is wrong with it.
type Problem struct {
	Field   string
	Problem string
}

func (p Problem) String() string { return p.Field + ": " + p.Problem }

// DecodeError reports every problem found in one message. It wraps one of
// the sentinels above, so errors.Is(err, ErrInvalidEvent) works.
type DecodeError struct {
	// EventID and Type are whatever could be read, for the log line; may be empty.
	EventID  string
	Type     string
	Problems []Problem
	kind     error
}

func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString(e.kind.Error())
	if e.EventID != "" || e.Type != "" {
		b.WriteString(" (")
		b.WriteString(clip(e.Type, 60))
		if e.EventID != "" {
			if e.Type != "" {
				b.WriteString(" ")
			}
			b.WriteString(clip(e.EventID, 60))
		}
		b.WriteString(")")
	}
	for i, p := range e.Problems {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// Unwrap returns the sentinel this error is an instance of.
func (e *DecodeError) Unwrap() error { return e.kind }

// Is reports whether e is an ErrInvalidUTF8: invalid, for (among others)
// a problem of text.
func (e *DecodeError) Is(target error) bool {
	if target != ErrInvalidUTF8 || e.kind != ErrInvalidEvent {
		return false
	}
	for _, p := range e.Problems {
		if strings.HasPrefix(p.Problem, CodeInvalidUTF8) {
			return true
		}
	}
	return false
}

// problems accumulates Problems during validation.
type problems []Problem

// add records a problem. Field names come from the input (unknown attribute
// and payload keys), so they are clipped: an error, and the dead-letter
// header that carries it, stays bounded whatever the input.
func (ps *problems) add(field, problem string) {
	const maxProblems = 20
	if len(*ps) == maxProblems {
		*ps = append(*ps, Problem{"...", "more problems not listed"})
	}
	if len(*ps) > maxProblems {
		return
	}
	*ps = append(*ps, Problem{clip(field, 80), clip(problem, 200)})
}
