package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Firefox is driven over WebDriver BiDi, which Firefox serves itself when
// started with --remote-debugging-port: Debian has no geckodriver, and
// chromedp speaks only the Chrome DevTools Protocol. The client below has
// the few commands the test needs.

// bidiOrigin is the Origin the websocket handshake sends (x/net/websocket
// always sends one); Firefox refuses an Origin it was not told to allow
// with --remote-allow-origins.
const bidiOrigin = "http://127.0.0.1"

// firefoxPrefs go to the fresh profile's user.js: no first-run or welcome
// pages, no update checks, no telemetry, no network calls of its own.
// (Firefox's remote agent also sets its recommended automation prefs.)
const firefoxPrefs = `user_pref("remote.active-protocols", 1);
user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("browser.startup.homepage_override.mstone", "ignore");
user_pref("browser.startup.page", 0);
user_pref("startup.homepage_welcome_url", "about:blank");
user_pref("browser.aboutwelcome.enabled", false);
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);
user_pref("app.update.disabledForTesting", true);
user_pref("app.normandy.enabled", false);
user_pref("messaging-system.rsexperimentloader.enabled", false);
user_pref("network.captive-portal-service.enabled", false);
user_pref("network.connectivity-service.enabled", false);
`

// bidiMsg is any message from the remote end: a command's reply (id set,
// type success or error) or an event (type event).
type bidiMsg struct {
	Type    string          `json:"type"`
	ID      *int            `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   string          `json:"error"`
	Message string          `json:"message"`
}

// bidiLog is a log.entryAdded event's entry.
type bidiLog struct {
	Type       string `json:"type"` // javascript (an uncaught error) or console
	Level      string `json:"level"`
	Text       string `json:"text"`
	Method     string `json:"method"`
	StackTrace *struct {
		CallFrames []struct {
			URL        string `json:"url"`
			LineNumber int    `json:"lineNumber"`
		} `json:"callFrames"`
	} `json:"stackTrace"`
}

func (l bidiLog) String() string {
	s := l.Type + " " + l.Level + ": " + l.Text
	if l.StackTrace != nil && len(l.StackTrace.CallFrames) > 0 {
		f := l.StackTrace.CallFrames[0]
		s += fmt.Sprintf(" (at %s:%d)", f.URL, f.LineNumber)
	}
	return s
}

// bidi is a WebDriver BiDi session with one Firefox, driving one tab.
type bidi struct {
	t    *testing.T
	conn *websocket.Conn
	tab  string // the browsing context under test

	wmu sync.Mutex // one writer at a time

	mu      sync.Mutex
	next    int
	waiting map[int]chan bidiMsg
	logs    []bidiLog
	readErr error
	gone    chan struct{} // closed when the reader stops
}

// firefox starts Debian's Firefox ESR at ff (found by testenv.Tool, so
// that a test under CI=true fails without it), headless, with a fresh
// profile, opens a BiDi session on it, subscribes to the log (uncaught errors) and returns the
// session driving its first tab. Firefox ends with the test.
func firefox(t *testing.T, ff string, width, height int) *bidi {
	t.Helper()
	prof := t.TempDir()
	if err := os.WriteFile(filepath.Join(prof, "user.js"), []byte(firefoxPrefs), 0o644); err != nil {
		t.Fatal(err)
	}
	// Port 0: Firefox picks a free port and says which on stderr, so no
	// other process can take it between a pick and Firefox's listen.
	cmd := exec.Command(ff, "--headless", "--no-remote", "--remote-debugging-port=0", "--remote-allow-origins="+bidiOrigin,
		"--profile", prof, fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	cmd.Env = append(os.Environ(), "MOZ_CRASHREPORTER_DISABLE=1", "MOZ_HEADLESS=1")
	// Firefox and its content processes die with the test binary, even a
	// SIGKILLed one, and are killed together, as a process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	out := &urlWatch{found: make(chan string, 1)}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting firefox: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b := &bidi{t: t, waiting: map[int]chan bidiMsg{}, gone: make(chan struct{})}
	t.Cleanup(func() {
		if b.conn != nil {
			b.conn.Close()
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	var wsURL string
	select {
	case wsURL = <-out.found:
	case <-exited:
		t.Fatalf("firefox exited before listening for WebDriver BiDi: %s", out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("firefox did not listen for WebDriver BiDi within 60s: %s", out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := websocket.NewConfig(wsURL+"/session", bidiOrigin)
	if err != nil {
		t.Fatal(err)
	}
	if b.conn, err = cfg.DialContext(ctx); err != nil {
		t.Fatalf("connecting to firefox's WebDriver BiDi at %s: %v", wsURL, err)
	}
	go b.read()

	var sess struct {
		Capabilities struct {
			BrowserName    string `json:"browserName"`
			BrowserVersion string `json:"browserVersion"`
		} `json:"capabilities"`
	}
	b.cmd("session.new", map[string]any{"capabilities": map[string]any{}}, &sess)
	t.Logf("WebDriver BiDi session with %s %s", sess.Capabilities.BrowserName, sess.Capabilities.BrowserVersion)
	b.cmd("session.subscribe", map[string]any{"events": []string{"log.entryAdded"}}, nil)
	// Uncaught errors and unhandled rejections, also as the page sees
	// them, before any of its own scripts run.
	b.cmd("script.addPreloadScript", map[string]any{"functionDeclaration": `() => {
		const errs = window.__uncaught = [];
		window.addEventListener("error", (e) => errs.push("error: " + e.message + " at " + e.filename + ":" + e.lineno));
		window.addEventListener("unhandledrejection", (e) => errs.push("unhandled rejection: " + e.reason + (e.reason && e.reason.stack ? " at " + e.reason.stack : "")));
	}`}, nil)
	var tree struct {
		Contexts []struct {
			Context string `json:"context"`
		} `json:"contexts"`
	}
	b.cmd("browsingContext.getTree", map[string]any{"maxDepth": 0}, &tree)
	if len(tree.Contexts) > 0 {
		b.tab = tree.Contexts[0].Context
	} else {
		var created struct {
			Context string `json:"context"`
		}
		b.cmd("browsingContext.create", map[string]any{"type": "tab"}, &created)
		b.tab = created.Context
	}
	return b
}

// urlWatch keeps Firefox's output and hands on the WebDriver BiDi address
// once Firefox prints it.
type urlWatch struct {
	testenv.Buffer
	found chan string
	once  sync.Once
}

var bidiListening = regexp.MustCompile(`WebDriver BiDi listening on (ws://\S+)`)

func (w *urlWatch) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if m := bidiListening.FindStringSubmatch(w.String()); m != nil {
		w.once.Do(func() { w.found <- m[1] })
	}
	return n, err
}

// read hands replies to their commands and keeps log entries, until the
// connection ends.
func (b *bidi) read() {
	defer close(b.gone)
	for {
		var data []byte
		if err := websocket.Message.Receive(b.conn, &data); err != nil {
			b.mu.Lock()
			b.readErr = err
			b.mu.Unlock()
			return
		}
		var m bidiMsg
		if err := json.Unmarshal(data, &m); err != nil {
			continue
		}
		b.mu.Lock()
		switch {
		case m.ID != nil:
			if ch, ok := b.waiting[*m.ID]; ok {
				ch <- m
				delete(b.waiting, *m.ID)
			}
		case m.Type == "event" && m.Method == "log.entryAdded":
			var l bidiLog
			if json.Unmarshal(m.Params, &l) == nil {
				b.logs = append(b.logs, l)
			}
		}
		b.mu.Unlock()
	}
}

// send sends a command and returns its reply (within d), or an error.
func (b *bidi) send(d time.Duration, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan bidiMsg, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg, err := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	b.wmu.Lock()
	err = websocket.Message.Send(b.conn, string(msg))
	b.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Type == "error" {
			return nil, fmt.Errorf("%s: %s: %s", method, m.Error, m.Message)
		}
		return m.Result, nil
	case <-b.gone:
		b.mu.Lock()
		defer b.mu.Unlock()
		return nil, fmt.Errorf("%s: the connection to firefox ended: %v", method, b.readErr)
	case <-time.After(d):
		b.mu.Lock()
		delete(b.waiting, id)
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: no reply within %v", method, d)
	}
}

// cmd sends a command, fails the test on an error, and decodes the
// result into result (unless nil).
func (b *bidi) cmd(method string, params, result any) {
	b.t.Helper()
	raw, err := b.send(30*time.Second, method, params)
	if err != nil {
		b.t.Fatal(err)
	}
	if result != nil {
		if err := json.Unmarshal(raw, result); err != nil {
			b.t.Fatalf("%s: decoding %s: %v", method, raw, err)
		}
	}
}

// remoteValue is a BiDi script result: a serialised value, or a node
// reference (sharedId).
type remoteValue struct {
	Type     string          `json:"type"`
	Value    json.RawMessage `json:"value"`
	SharedID string          `json:"sharedId"`
}

// eval evaluates expr in the tab, awaiting a promise, within d.
func (b *bidi) eval(d time.Duration, expr string) (remoteValue, error) {
	raw, err := b.send(d, "script.evaluate", map[string]any{"expression": expr, "target": map[string]any{"context": b.tab},
		"awaitPromise": true, "resultOwnership": "none"})
	if err != nil {
		return remoteValue{}, err
	}
	var r struct {
		Type             string      `json:"type"`
		Result           remoteValue `json:"result"`
		ExceptionDetails struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return remoteValue{}, err
	}
	if r.Type == "exception" {
		return remoteValue{}, errors.New("exception: " + r.ExceptionDetails.Text)
	}
	return r.Result, nil
}

// ffJS evaluates expr in the tab and decodes its value (passed through
// JSON.stringify in the page) into a T.
func ffJS[T any](t *testing.T, b *bidi, expr string) T {
	t.Helper()
	var v T
	rv, err := b.eval(30*time.Second, "(async () => JSON.stringify(await ("+expr+")))()")
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	var s string
	if rv.Type != "string" || json.Unmarshal(rv.Value, &s) != nil || json.Unmarshal([]byte(s), &v) != nil {
		t.Fatalf("evaluating %s: %s %s", expr, rv.Type, rv.Value)
	}
	return v
}

// waitFF waits, at most d, until the JavaScript expression cond is true
// in the page (polled at each animation frame, in the page).
func waitFF(t *testing.T, b *bidi, d time.Duration, what, cond string) {
	t.Helper()
	rv, err := b.eval(d+10*time.Second, fmt.Sprintf(`new Promise((resolve) => {
		const end = performance.now() + %d;
		const poll = () => { if (%s) resolve(true); else if (performance.now() > end) resolve(false); else requestAnimationFrame(poll); };
		poll(); })`, d.Milliseconds(), cond))
	if err == nil && rv.Type == "boolean" && string(rv.Value) == "true" {
		return
	}
	if err == nil {
		err = errors.New("still false")
	}
	state, _ := b.eval(10*time.Second, pageStateJS)
	t.Fatalf("waiting %s until %s: %v; page: %s", d, what, err, state.Value)
}

// element is a reference to the element with id, for input actions.
func (b *bidi) element(id string) map[string]any {
	b.t.Helper()
	rv, err := b.eval(10*time.Second, fmt.Sprintf(`document.getElementById(%q)`, id))
	if err != nil || rv.Type != "node" || rv.SharedID == "" {
		b.t.Fatalf("element #%s: %v %+v", id, err, rv)
	}
	return map[string]any{"sharedId": rv.SharedID}
}

// click clicks the middle of the element with id with the mouse.
func (b *bidi) click(id string) {
	b.t.Helper()
	b.cmd("input.performActions", map[string]any{"context": b.tab, "actions": []any{map[string]any{
		"type": "pointer", "id": "mouse", "parameters": map[string]any{"pointerType": "mouse"},
		"actions": []any{
			map[string]any{"type": "pointerMove", "x": 0, "y": 0, "origin": map[string]any{"type": "element", "element": b.element(id)}},
			map[string]any{"type": "pointerDown", "button": 0},
			map[string]any{"type": "pointerUp", "button": 0},
		}}}}, nil)
}

// typeText types text on the keyboard, a key at a time, into the focused
// element.
func (b *bidi) typeText(text string) {
	b.t.Helper()
	var keys []any
	for _, r := range text {
		keys = append(keys, map[string]any{"type": "keyDown", "value": string(r)}, map[string]any{"type": "keyUp", "value": string(r)})
	}
	b.cmd("input.performActions", map[string]any{"context": b.tab, "actions": []any{map[string]any{"type": "key", "id": "keyboard", "actions": keys}}}, nil)
}

// uncaught is every error the page did not catch so far, as the log and
// the page itself saw them, and the log's other entries.
func (b *bidi) uncaught(t *testing.T) (errs, other []string) {
	t.Helper()
	b.mu.Lock()
	for _, l := range b.logs {
		if l.Type == "javascript" || l.Level == "error" {
			errs = append(errs, l.String())
		} else {
			other = append(other, l.String())
		}
	}
	b.mu.Unlock()
	return append(errs, ffJS[[]string](t, b, `window.__uncaught || ["the error listener is missing: the preload script did not run"]`)...), other
}

// TestUIFirefox drives the live view in headless Firefox ESR (WebDriver
// BiDi) against a real stack (kfake on loopback, a projector, the
// gateway), for the essentials TestUIBrowser checks in Chromium: the page
// loads with the token from its fragment (and drops it from the address
// bar), the tree shows the run's nodes, a status change produced to Kafka
// shows within a second, human input typed in the box produces a priority
// wake shown on the page, and nothing on the page throws an uncaught
// error.
func TestUIFirefox(t *testing.T) {
	ff := testenv.Tool(t, "firefox-esr") // before the stack: skipped (or failed) at once
	s := newUIStack(t)
	const run = "ui-run"
	s.generate(t, run, 60)
	b := firefox(t, ff, 1400, 1000)

	b.cmd("browsingContext.navigate", map[string]any{"context": b.tab, "url": s.srv.URL + UIPath + "#token=" + tokAll + "&run=" + run, "wait": "complete"}, nil)
	waitFF(t, b, 10*time.Second, "the tree shows the run's 60 nodes",
		`document.getElementById("tree-count").textContent === "(60 nodes)" && !!document.querySelector('#tree-body tr[data-agent="conductor"]')`)
	if !ffJS[bool](t, b, `[...document.querySelectorAll("#tree-body tr.band")].some(tr => /^plan plan-conductor · band 1 of \d+/.test(tr.textContent))`) {
		t.Error("the conductor's plan is not drawn as bands")
	}
	if hash := ffJS[string](t, b, `location.hash`); strings.Contains(hash, "token") || hash != "#run="+run {
		t.Errorf("the address bar keeps %q: the token must leave it", hash)
	}
	waitFF(t, b, 10*time.Second, "the wake stream is live", `document.getElementById("conn").dataset.state === "live"`)

	// A status change produced to Kafka shows within a second.
	target := s.nodeWith(t, run, topics.StatusRunning)
	waitFF(t, b, 5*time.Second, target+" is rendered running", rowStatus(target, topics.StatusRunning))
	s.produce(t, statusEvent(run, target, topics.StatusBlocked))
	began := time.Now()
	waitFF(t, b, time.Second, target+" shows blocked within a second", rowStatus(target, topics.StatusBlocked))
	t.Logf("status change on the page %v after it was produced", time.Since(began).Round(time.Millisecond))
	if !ffJS[bool](t, b, fmt.Sprintf(`document.querySelector('#tree-body tr[data-agent=%q]').classList.contains("flag")`, target)) {
		t.Error("a blocked node is not marked")
	}

	// Human input typed in the box: the priority wake shows, with latency.
	b.click("input-text")
	b.typeText("focus on the blocked node")
	if got := ffJS[string](t, b, `document.getElementById("input-text").value`); got != "focus on the blocked node" {
		t.Fatalf("the input box holds %q after typing", got)
	}
	b.click("input-send")
	waitFF(t, b, 10*time.Second, "the input's priority wake is shown",
		`document.getElementById("input-result").dataset.state === "woken" && !!document.querySelector("#feed li.prio")`)
	t.Logf("the page saw its input's priority wake %s ms after sending", ffJS[string](t, b, `document.getElementById("input-result").dataset.latency`))
	if !ffJS[bool](t, b, `document.querySelector("#feed li.prio").textContent.includes("human_input") && document.querySelector("#feed li.prio").textContent.includes("focus on the blocked node")`) {
		t.Error("the priority wake's human_input trigger is not in the feed")
	}

	errs, other := b.uncaught(t)
	for _, e := range errs {
		t.Errorf("the page in firefox: %s", e)
	}
	for _, o := range other {
		t.Logf("firefox log: %s", o)
	}
}
