// Package sdk_test holds the tests of canopy's client packages, which are
// not Go: sdk/python (canopy-agents, imported as canopy) and
// sdk/typescript. They install each package from the checkout, run its own
// test suite against both brokers canopy is tested with
// (internal/brokertest) and a real projector, and check that each follows
// the contract (schema/events): the same event types and fields, the same
// partitioning, and a version that moves with the schemas.
package sdk_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/brokertest"
)

// TestMain fails the package's tests if any goroutine is left running, and
// stops the shared Apache Kafka node after them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(brokertest.M(m)) }
