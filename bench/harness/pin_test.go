package harness

import (
	"errors"
	"reflect"
	"testing"
)

func TestSplitCPUs(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cpus       []int
		instances  int
		projectors [][]int
		harness    []int
		forI       []int // forProjector(i)[0] for i = 0, 1, ...
	}{
		{"this machine: 1 + 1", []int{0, 1}, 1, [][]int{{1}}, []int{0}, []int{1, 1}},
		{"3 instances on 2 CPUs share the one", []int{0, 1}, 3, [][]int{{1}}, []int{0}, []int{1, 1, 1}},
		{"the last CPUs, one each", []int{0, 1, 2, 3}, 2, [][]int{{2}, {3}}, []int{0, 1}, []int{2, 3, 2}},
		{"the harness keeps one", []int{0, 1, 2, 3}, 5, [][]int{{1}, {2}, {3}}, []int{0}, []int{1, 2, 3, 1}},
		{"an affinity mask with gaps, unsorted", []int{7, 2, 5}, 1, [][]int{{7}}, []int{2, 5}, []int{7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := splitCPUs(tc.cpus, tc.instances)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Projectors, tc.projectors) || !reflect.DeepEqual(p.Harness, tc.harness) {
				t.Fatalf("splitCPUs(%v, %d) = projectors %v, harness %v; want %v, %v", tc.cpus, tc.instances, p.Projectors, p.Harness, tc.projectors, tc.harness)
			}
			for i, want := range tc.forI {
				if got := p.forProjector(i); len(got) != 1 || got[0] != want {
					t.Errorf("forProjector(%d) = %v, want [%d]", i, got, want)
				}
			}
		})
	}
	if _, err := splitCPUs([]int{0}, 1); !errors.Is(err, ErrPin) {
		t.Errorf("one CPU: got %v, want ErrPin", err)
	}
}
