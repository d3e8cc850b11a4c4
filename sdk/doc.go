// Package sdk holds the tests of canopy's client packages, which are not Go:
// sdk/python (canopy-agents, the Python package) and sdk/typescript. Its Go
// tests install each package from the checkout, run its own test suite
// against both brokers canopy is tested with (internal/brokertest) and a
// real projector, and check that each package follows the contract
// (schema/events): the same event types and fields, the same partitioning,
// and a version that moves with the schemas.
package sdk
