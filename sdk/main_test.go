package sdk_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/brokertest"
)

// TestMain fails the package's tests if any goroutine is left running, and
// stops the shared Apache Kafka node after them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(brokertest.M(m)) }
