package projectortest_test

import (
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/projectortest"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestValidEventOfEveryType: ValidEvent makes a valid event of every type
// of this build.
func TestValidEventOfEveryType(t *testing.T) {
	for _, typ := range topics.EventTypes() {
		ev, err := projectortest.ValidEvent(typ, "e1", "r1", "a1", time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
		if err != nil {
			t.Errorf("%s: %v", typ, err)
			continue
		}
		if err := ev.Validate(); err != nil || ev.Type != typ {
			t.Errorf("%s: %v", typ, err)
		}
	}
}
