package projectortest

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// Limits of what a check prints: a failing check under chaos can find
// thousands of problems, and the first few of each kind say what went wrong.
const (
	maxPerKind      = 6   // problems of one kind reported in full; the rest are counted
	maxProblemLines = 8   // lines of one problem
	maxLineBytes    = 600 // bytes of one line
)

// report gathers the problems a check finds, by kind, and reports them at
// the end in one Errorf, clipped.
type report struct {
	kinds []*kind
}

type kind struct {
	name     string
	problems []string
	total    int
}

// add records a problem of a kind (a short phrase, e.g. "duplicate wakes").
func (r *report) add(name, format string, args ...any) {
	var k *kind
	for _, c := range r.kinds {
		if c.name == name {
			k = c
		}
	}
	if k == nil {
		k = &kind{name: name}
		r.kinds = append(r.kinds, k)
	}
	k.total++
	if len(k.problems) < maxPerKind {
		k.problems = append(k.problems, clipProblem(fmt.Sprintf(format, args...)))
	}
}

// flush reports the problems, if any, through tb.Errorf under a title.
func (r *report) flush(tb testing.TB, title string) {
	tb.Helper()
	if len(r.kinds) == 0 {
		return
	}
	var b strings.Builder
	b.WriteString(title + ":")
	for _, k := range r.kinds {
		fmt.Fprintf(&b, "\n%s: %d", k.name, k.total)
		for _, p := range k.problems {
			b.WriteString("\n  - ")
			b.WriteString(strings.ReplaceAll(p, "\n", "\n    "))
		}
		if more := k.total - len(k.problems); more > 0 {
			fmt.Fprintf(&b, "\n  … and %d more", more)
		}
	}
	tb.Errorf("%s", b.String())
}

func clipProblem(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > maxProblemLines {
		lines = append(lines[:maxProblemLines], fmt.Sprintf("… %d more lines", len(lines)-maxProblemLines))
	}
	for i, l := range lines {
		if len(l) > maxLineBytes {
			cut := maxLineBytes
			for cut > 0 && !utf8.RuneStart(l[cut]) {
				cut--
			}
			lines[i] = l[:cut] + fmt.Sprintf("… (%d bytes)", len(l))
		}
	}
	return strings.Join(lines, "\n")
}

// count is the number of problems added so far.
func (r *report) count() int {
	n := 0
	for _, k := range r.kinds {
		n += k.total
	}
	return n
}
