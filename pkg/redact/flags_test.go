package redact_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/pkg/redact"
)

// TestFlags: the flags add rules from repeated flags and from one value
// holding several (as an environment variable does), refuse a value with
// a wrong rule as a whole, and read back what they hold.
func TestFlags(t *testing.T) {
	var c redact.Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	err := fs.Parse([]string{
		"-redact-field", "label,tree.node_status:reason\ncontent_ref",
		"-redact-field", "ref",
		"-redact-pattern", "host=\\bh[0-9]+\\b\nticket=SEC-[0-9]+,x",
		"-redact-pattern", "acct=acct_[a-z0-9]{8}",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fs.Lookup("redact-field").Value.String(); got != "label,tree.node_status:reason,content_ref,ref" {
		t.Errorf("-redact-field reads back %q", got)
	}
	if got := fs.Lookup("redact-pattern").Value.String(); got != "host=\\bh[0-9]+\\b\nticket=SEC-[0-9]+,x\nacct=acct_[a-z0-9]{8}" {
		t.Errorf("-redact-pattern reads back %q", got)
	}
	p, err := redact.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := p.Text("h12 opened SEC-7,x for acct_ab12cd34", 0, nil); got != "[redacted:host] opened [redacted:ticket] for [redacted:acct]" {
		t.Errorf("Text = %q", got)
	}
	for _, bad := range [][]string{
		{"-redact-pattern", "ok=a+\nbroken=(a"},
		{"-redact-field", "label,no_such_field"},
	} {
		before := fs.Lookup(strings.TrimPrefix(bad[0], "-")).Value.String()
		if err := fs.Parse(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
		if after := fs.Lookup(strings.TrimPrefix(bad[0], "-")).Value.String(); after != before {
			t.Errorf("%q: refused, but the flag went from %q to %q", bad, before, after)
		}
	}
}
