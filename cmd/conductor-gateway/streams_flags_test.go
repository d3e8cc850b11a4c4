package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestStreamFlags: the wake streams' flags reach the configuration's
// checks, and their CANOPY_* variables are parsed as the flags are.
func TestStreamFlags(t *testing.T) {
	var stderr bytes.Buffer
	args := []string{"-check-config", "-brokers", "127.0.0.1:1", "-jwt-key-file", "/dev/null",
		"-max-streams-per-subject", "-1", "-stream-queue", "-2", "-replay-bytes", "-3", "-tail-idle", "-1s"}
	if code := run(context.Background(), args, &stderr, nil); code != 2 {
		t.Fatalf("exit %d, want 2: %s", code, stderr.String())
	}
	for _, want := range []string{"MaxStreamsPerSubject", "StreamQueue", "ReplayBytes", "TailIdle"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q does not mention %q", stderr.String(), want)
		}
	}
	for _, env := range []string{"CANOPY_MAX_STREAMS_PER_SUBJECT", "CANOPY_STREAM_QUEUE", "CANOPY_REPLAY_BYTES", "CANOPY_TAIL_IDLE"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "many")
			var stderr bytes.Buffer
			if code := run(context.Background(), []string{"-check-config"}, &stderr, nil); code != 2 || !strings.Contains(stderr.String(), env) {
				t.Errorf("%s=many: exit %d, %s", env, code, stderr.String())
			}
		})
	}
}
