package harness

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrPin is wrapped by the errors of Config.Pin's CPU split.
var ErrPin = errors.New("harness: -pin")

// Pinning is how a pinned run split the CPUs: the projector instances'
// CPUs, in turn by instance, and the harness's (the embedded broker, the
// gateway, the load and the readers).
type Pinning struct {
	Projectors [][]int `json:"projectors"`
	Harness    []int   `json:"harness"`
}

// splitCPUs splits cpus between the harness and up to instances projector
// instances: the projectors get the last min(instances, len(cpus)-1) CPUs,
// one each, and the harness the others. A projector set of one CPU each
// keeps an instance's GC and scheduling off the harness's CPUs; with more
// instances than projector CPUs, forProjector shares them round-robin.
func splitCPUs(cpus []int, instances int) (Pinning, error) {
	if len(cpus) < 2 {
		return Pinning{}, fmt.Errorf("%w: %d CPU(s) available, want at least 2 (one for the projectors, one for the harness)", ErrPin, len(cpus))
	}
	if instances < 1 {
		return Pinning{}, fmt.Errorf("%w: %d projector instances", ErrPin, instances)
	}
	cpus = slices.Sorted(slices.Values(cpus))
	k := min(instances, len(cpus)-1)
	p := Pinning{Harness: slices.Clone(cpus[:len(cpus)-k])}
	for _, c := range cpus[len(cpus)-k:] {
		p.Projectors = append(p.Projectors, []int{c})
	}
	return p, nil
}

// forProjector is the CPU set of projector instance i: the projector sets
// round-robin.
func (p Pinning) forProjector(i int) []int { return p.Projectors[i%len(p.Projectors)] }

// String is the split as RESULTS.md says it.
func (p Pinning) String() string {
	var parts []string
	for i, s := range p.Projectors {
		parts = append(parts, fmt.Sprintf("projector set %d: CPU %s", i, cpuList(s)))
	}
	return fmt.Sprintf("harness (broker, gateway, load, readers): CPU %s; %s (instance i runs on set i mod %d)",
		cpuList(p.Harness), strings.Join(parts, ", "), len(p.Projectors))
}

func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// availableCPUs is this process's affinity mask.
func availableCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("%w: reading the CPU affinity: %v", ErrPin, err)
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

func cpuSet(cpus []int) *unix.CPUSet {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return &set
}

// pinSelf pins every thread of this process to cpus, and GOMAXPROCS to
// their count.
func pinSelf(cpus []int) error {
	if err := pinTasks("/proc/self/task", cpus); err != nil {
		return err
	}
	runtime.GOMAXPROCS(len(cpus))
	return nil
}

// pinProc pins a started child to cpus (its GOMAXPROCS is set by its
// environment, as Go reads the CPU count when it starts).
func pinProc(pid int, cpus []int) error {
	return pinTasks(fmt.Sprintf("/proc/%d/task", pid), cpus)
}

// pinTasks sets the affinity of every thread in a process's task
// directory. Affinity is per thread, and a new thread inherits its
// creator's: setting every thread, again until a pass finds none it had
// not set, leaves none outside.
func pinTasks(dir string, cpus []int) error {
	set := cpuSet(cpus)
	done := map[int]bool{}
	for {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrPin, err)
		}
		fresh := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh = true
			// A thread that exited meanwhile is no concern.
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("%w: pinning thread %d: %v", ErrPin, tid, err)
			}
			done[tid] = true
		}
		if !fresh {
			return nil
		}
	}
}

// pinHarness splits this process's CPUs for cfg's scenarios and pins the
// harness to its share.
func pinHarness(cfg Config) (*Pinning, error) {
	cpus, err := availableCPUs()
	if err != nil {
		return nil, err
	}
	instances := 1
	for _, name := range cfg.Scenarios {
		switch name {
		case "scale":
			instances = max(instances, slices.Max(cfg.Instances))
		case "failover":
			instances = max(instances, cfg.FailoverInstances)
		}
	}
	p, err := splitCPUs(cpus, instances)
	if err != nil {
		return nil, err
	}
	if err := pinSelf(p.Harness); err != nil {
		return nil, err
	}
	return &p, nil
}
