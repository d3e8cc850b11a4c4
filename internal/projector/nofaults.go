//go:build !faults

package projector

import "github.com/canopy-dev/canopy/pkg/topics"

// The hooks of faults.go, empty: a build without the faults tag injects
// nothing, and the compiler drops the calls.

func (*worker) faultApply(*topics.Event) {}

func (*worker) faultBuild(*topics.Wake) error { return nil }

func (*worker) faultEncode(*topics.Wake) error { return nil }
