package cluster

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// TestReadQuerySecret: the file's content without surrounding whitespace,
// refused when short, empty or not a header's worth of printable ASCII.
func TestReadQuerySecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string { return testenv.WriteFile(t, dir, name, content) }
	want := strings.Repeat("ab", 20)
	if got, err := ReadQuerySecret(write("ok", "  "+want+"\n")); err != nil || string(got) != want {
		t.Errorf("ReadQuerySecret: %q %v, want %q", got, err, want)
	}
	for name, content := range map[string]string{"empty": "", "blank": " \n", "short": "abc\n", "space": want + " " + want, "newline": want + "\n" + want, "nonascii": want + "é"} {
		if _, err := ReadQuerySecret(write(name, content)); err == nil {
			t.Errorf("ReadQuerySecret(%s %q): accepted", name, content)
		}
	}
	if _, err := ReadQuerySecret(filepath.Join(dir, "missing")); err == nil {
		t.Error("ReadQuerySecret of a missing file: accepted")
	}
}
