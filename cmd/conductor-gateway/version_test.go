package main

import (
	"testing"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// TestVersionNamesTheCommit: a gateway built in the checkout prints its
// commit and Go version, from the build information the toolchain embeds
// (the same values as canopy_build_info).
func TestVersionNamesTheCommit(t *testing.T) { testenv.VersionNamesTheCommit(t, ".", "version") }
