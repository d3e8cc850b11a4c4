package redact_test

import (
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/pkg/redact"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// BenchmarkText is the cost of redacting one free-text field: clean text
// (the common case, the prefilter's), text with a secret, and the longest
// input text the contract allows.
func BenchmarkText(b *testing.B) {
	p := redact.Default()
	for _, c := range []struct{ name, text string }{
		{"clean", "human message 12: please summarise what is blocked"},
		{"command", "go test ./internal/projector -run TestCanary -count=1 -race -timeout=10m"},
		{"secret", "curl -H 'Authorization: Bearer 4f9a8b7c6d5e4f3a2b1c' https://api.example.com/v1"},
		{"clean-16k", strings.Repeat("the quick brown fox jumps over the lazy dog ", topics.MaxInputTextLength/44)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.text)))
			for b.Loop() {
				p.Text(c.text, topics.MaxInputTextLength, nil)
			}
		})
	}
}

// BenchmarkEvent is the cost per event of a type without free text (most
// of an agent's events: one map lookup) and of a human input.
func BenchmarkEvent(b *testing.B) {
	p := redact.Default()
	b.Run("no-free-text", func(b *testing.B) {
		ev := &topics.Event{Type: topics.TypeNodeStatus, Data: &topics.NodeStatus{Status: topics.StatusRunning}}
		b.ReportAllocs()
		for b.Loop() {
			p.Event(ev, nil)
		}
	})
	b.Run("input", func(b *testing.B) {
		in := &topics.Input{InputKind: "steer", Text: "human message 12: please summarise what is blocked"}
		ev := &topics.Event{Type: topics.TypeInput, Data: in}
		b.ReportAllocs()
		for b.Loop() {
			p.Event(ev, nil)
		}
	})
}
