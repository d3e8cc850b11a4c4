package testenv

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that a process's output copier, a logger and the
// test may use at once: what tests capture output into while they wait on
// it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
