//go:build uicapture

package gateway

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/canopy-dev/canopy/internal/workload"
)

// TestUICapture is not a check but a tool, run on demand:
//
//	CANOPY_UI_SCREENSHOT=$PWD/docs/live-view.png go test -tags uicapture -run TestUICapture ./internal/gateway/
//	CANOPY_UI_MEASURE=10000 go test -tags uicapture -run TestUICapture ./internal/gateway/
//
// The first writes a screenshot of the live view on a generated run of 200
// nodes with the runtime's activity (README, docs/UI.md); the second measures the view on a generated
// run of that many nodes: time from navigation to the first render of the
// tree, to the whole tree, the time of a scroll's repaint, and the page's
// JS heap. Behind the uicapture build tag, so that make test neither runs
// nor skips it.
func TestUICapture(t *testing.T) {
	shot, measure := os.Getenv("CANOPY_UI_SCREENSHOT"), os.Getenv("CANOPY_UI_MEASURE")
	if shot == "" && measure == "" {
		t.Fatal("set CANOPY_UI_SCREENSHOT=<file.png> or CANOPY_UI_MEASURE=<nodes>")
	}
	s := newUIStackWith(t, 50_000)
	if shot != "" {
		const run = "demo-200"
		s.generateSpec(t, workload.Spec{RunID: run, Nodes: 200, Activity: true}, false)
		ctx := browser(t, 1440, 1400)
		if err := chromedp.Do(ctx, chromedp.Navigate(s.srv.URL+UIPath+"#token="+tokAll+"&run="+run)); err != nil {
			t.Fatal(err)
		}
		waitJS(t, ctx, 20*time.Second, "the tree is drawn", `document.getElementById("tree-count").textContent === "(200 nodes)"`)
		// A human steers, so the feed shows a priority wake, and the
		// wake before it is picked on the timeline.
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("input-text"), "focus on the blocked nodes first"), chromedp.Click(chromedp.ID("input-send"))); err != nil {
			t.Fatal(err)
		}
		waitJS(t, ctx, 10*time.Second, "the priority wake is shown, and the tree read again", `document.getElementById("input-result").dataset.state === "woken" && document.getElementById("tree-count").textContent === "(201 nodes)" && document.querySelectorAll("#summary dd")[1].textContent === "201"`)
		if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`(() => { const t = document.getElementById("timeline"); t.selectedIndex = Math.max(0, t.options.length - 2); t.dispatchEvent(new Event("change")); })()`)); err != nil {
			t.Fatal(err)
		}
		waitJS(t, ctx, 5*time.Second, "the snapshot is shown", `!!document.getElementById("snap-title")`)
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", shot, len(png))
	}
	if measure != "" {
		n, err := strconv.Atoi(measure)
		if err != nil || n < 2 {
			t.Fatalf("CANOPY_UI_MEASURE=%q: want a node count", measure)
		}
		run := fmt.Sprintf("big-%d", n)
		s.generateUntil(t, run, n, true)
		ctx := browser(t, 1440, 1000)
		began := time.Now()
		if err := chromedp.Do(ctx, chromedp.Navigate(s.srv.URL+UIPath+"#token="+tokAll+"&run="+run)); err != nil {
			t.Fatal(err)
		}
		waitJS(t, ctx, 60*time.Second, "the first rows are drawn", `document.querySelectorAll("#tree-body tr[data-agent]").length > 0`)
		first := time.Since(began)
		waitJS(t, ctx, 120*time.Second, "every node is in the tree", fmt.Sprintf(`document.getElementById("tree-count").textContent === "(%d nodes)"`, n))
		all := time.Since(began)
		rows := js[int](t, ctx, `document.querySelectorAll("#tree-body tr").length`)
		// A repaint of the visible rows at 20 scroll positions (what a scroll
		// costs: the tree draws only the rows in view).
		scroll := js[float64](t, ctx, `(() => { const b = document.getElementById("tree-scroll"); const t0 = performance.now();
			for (let i = 1; i <= 20; i++) { b.scrollTop = i * b.scrollHeight / 21; window.canopyUI.paint(); document.getElementById("tree-body").getBoundingClientRect(); }
			return (performance.now() - t0) / 20; })()`)
		// A whole re-render, as each wake causes (the tree order is rebuilt).
		rerender := js[float64](t, ctx, `(() => { const t0 = performance.now(); for (let i = 0; i < 5; i++) { window.canopyUI.rerender(); document.getElementById("tree-body").getBoundingClientRect(); } return (performance.now() - t0) / 5; })()`)
		heap, err := chromedp.Run(ctx, chromedp.Action[runtime.GetHeapUsageResult](func(ctx context.Context, tg *chromedp.Target) (runtime.GetHeapUsageResult, error) {
			return cdp.Call(ctx, tg, runtime.GetHeapUsage, cdp.Empty{})
		}))
		if err != nil {
			t.Fatal(err)
		}
		used, total := heap.UsedSize, heap.TotalSize
		t.Logf("%d nodes: first rows drawn %v after navigation, whole tree %v; %d rows in the DOM; scroll repaint %.1f ms; full re-render %.1f ms; JS heap %.1f MB used of %.1f MB",
			n, first.Round(time.Millisecond), all.Round(time.Millisecond), rows, scroll, rerender, used/1e6, total/1e6)
	}
}
