package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// proc is a projector instance running as a process of the built binary,
// so that its CPU and memory are its own (from /proc/<pid>) and a SIGKILL
// is real.
type proc struct {
	name   string
	cmd    *exec.Cmd
	out    lockedBuffer
	exited chan struct{}
	err    error  // set before exited is closed
	killed bool   // stopped on purpose: exiting is not a failure
	addr   string // its query endpoint, once its log has said it
	mu     sync.Mutex
}

// lockedBuffer is the child's output: written by exec's copier, read by
// the harness when it reports a failure.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startProc starts bin; with cpus, pinned to them and with a GOMAXPROCS of
// their count (Go reads the CPU count once, when it starts).
func startProc(name, bin string, args []string, cpus []int) (*proc, error) {
	p := &proc{name: name, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if len(cpus) > 0 {
		p.cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(len(cpus)))
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	if len(cpus) > 0 {
		if err := pinProc(p.pid(), cpus); err != nil {
			p.kill()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop sends SIGTERM and waits up to grace for the process to stop, then
// kills it. It reports an unclean stop.
func (p *proc) stop(grace time.Duration) error {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	if p.hasExited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		if p.err != nil {
			return fmt.Errorf("%s exited with %v on SIGTERM", p.name, p.err)
		}
		return nil
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", p.name, grace)
	}
}

// died reports an exit that was not asked for.
func (p *proc) died() error {
	if !p.hasExited() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killed {
		return nil
	}
	out := p.out.String()
	if len(out) > 4000 {
		out = "..." + out[len(out)-4000:]
	}
	return fmt.Errorf("projector %s exited: %v\n%s", p.name, p.err, out)
}

// procSample is what /proc says of a process at one time.
type procSample struct {
	cpu      time.Duration // user + system CPU since it started
	rss, hwm int64         // resident set size now and at its peak, bytes
}

func sampleProc(pid int) (procSample, error) {
	var s procSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name (field 2) may hold spaces; the fields after its
	// closing parenthesis are fixed: utime and stime are the 12th and 13th.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return s, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	s.cpu = time.Duration(ut+st) * time.Second / clockTicks
	status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	defer status.Close()
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		line := sc.Text()
		for _, k := range []struct {
			prefix string
			to     *int64
		}{{"VmRSS:", &s.rss}, {"VmHWM:", &s.hwm}} {
			if rest, ok := strings.CutPrefix(line, k.prefix); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				*k.to = kb << 10
			}
		}
	}
	return s, sc.Err()
}

// machineCPU reads /proc/stat's aggregate line: busy and total time in
// ticks, for the machine's utilisation over an interval.
func machineCPU() (busy, total int64, err error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0, fmt.Errorf("/proc/stat: empty")
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", sc.Text())
	}
	for i, v := range fields[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle and iowait
			busy += n
		}
	}
	return busy, total, nil
}
