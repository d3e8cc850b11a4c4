package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag.Value of a size in bytes: a plain number of bytes, or
// one with a binary unit as GOMEMLIMIT writes them (KiB, MiB, GiB, TiB) or
// as Kubernetes does (Ki, Mi, Gi, Ti), so that a container's memory limit
// can be passed as it is written.
type byteSize struct{ n *int64 }

func (b byteSize) String() string {
	if b.n == nil {
		return "0"
	}
	if *b.n > 0 && *b.n%(1<<20) == 0 {
		return fmt.Sprintf("%dMiB", *b.n>>20)
	}
	return strconv.FormatInt(*b.n, 10)
}

func (b byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b.n = n
	return nil
}

func parseByteSize(s string) (int64, error) {
	num := strings.TrimRight(s, "BKMGTikb")
	unit := s[len(num):]
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "Ki": 10, "MiB": 20, "Mi": 20, "GiB": 30, "Gi": 30, "TiB": 40, "Ti": 40}
	sh, ok := shift[unit]
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if !ok || err != nil || n < 0 || n > (1<<62)>>sh {
		return 0, fmt.Errorf("%q: want bytes, or a whole number with a unit of KiB, MiB, GiB or TiB (Ki, Mi, Gi, Ti)", s)
	}
	return n << sh, nil
}
