package sdk_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/brokertest"
)

// TestMain fails the package's tests if any goroutine is left running, and
// stops the Apache Kafka node of the broker-matrix tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(brokertest.M(m)) }
