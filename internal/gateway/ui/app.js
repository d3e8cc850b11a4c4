// canopy's live run view. No framework, no build step: the gateway serves
// this file as is. Every data call carries the bearer token the user gave
// (kept in sessionStorage; a #token= fragment is read once and removed from
// the address bar). Facts the projection does not have are shown as such,
// never as healthy (seed 003).
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const ROW = 28;               // px, the tree's fixed row height (virtualised rendering)
  const NEAR_EXPIRY_MS = 10000; // a lease this close to expiry is marked
  const STALE_MS = 15000;       // what you see is "stale" when nothing was heard for this long
  const MAX_TIMELINE = 1000;    // wakes kept in the timeline (the oldest leave first)
  const MAX_FEED = 100;

  const S = {
    run: "", token: "",
    nodes: new Map(),       // agent_id -> node view (+ _seq: the as_of_event_seq it is from)
    order: [],              // agent ids in tree order
    total: null,            // the run's node count as the projector said
    readModel: null,
    lastHeard: 0,           // Date.now() of the last fact received
    asOf: null,             // the run clock of the newest fact
    lastEventId: "0.0",     // the wake stream's resume position
    stream: null,           // AbortController of the wake stream
    gen: 0,                 // bumps on every run switch: late answers of an old run are ignored
    wakes: [],              // timeline, oldest first
    dropped: 0,
    pending: new Map(),     // event_id of a human input -> performance.now() when posted
    inputWakes: new Map(),  // event_id of a human input -> its wake, when the wake came first
    historyCursor: "", historyDone: false, historyLoading: false,
    refreshTimer: 0, refreshing: false, refreshAgain: false,
    reconnects: 0,
  };
  window.canopyUI = S; // for tests and the curious: the view's state (S.paint repaints the tree's visible rows)

  // ---- token and run from the fragment ----
  function readFragment() {
    const f = new URLSearchParams(location.hash.slice(1));
    const tok = f.get("token");
    if (tok) sessionStorage.setItem("canopy.token", tok);
    S.token = sessionStorage.getItem("canopy.token") || "";
    const run = f.get("run") || "";
    // Keep the run in the address bar (shareable), drop the token.
    const keep = run ? "#run=" + encodeURIComponent(run) : "";
    if (location.hash !== keep) history.replaceState(null, "", location.pathname + keep);
    return run;
  }

  function api(path, opts = {}) {
    const headers = Object.assign({ Authorization: "Bearer " + S.token }, opts.headers || {});
    return fetch("/v1/runs/" + encodeURIComponent(S.run) + path, Object.assign({}, opts, { headers, cache: "no-store" }));
  }

  async function problemOf(resp) {
    try { const p = await resp.json(); return p.detail || p.title || resp.statusText; } catch { return resp.statusText; }
  }

  function showMessage(text, kind) {
    const m = $("message");
    if (!text) { m.hidden = true; m.textContent = ""; return; }
    m.hidden = false; m.dataset.kind = kind || "error"; m.textContent = text;
  }

  // ---- opening a run ----
  function openRun(run) {
    if (S.stream) S.stream.abort();
    clearTimeout(S.refreshTimer); S.refreshTimer = 0; // else a cleared timer's id would block every later refresh
    Object.assign(S, { run, nodes: new Map(), order: [], total: null, readModel: null, lastHeard: 0, asOf: null,
      lastEventId: "0.0", stream: null, wakes: [], dropped: 0, pending: new Map(), inputWakes: new Map(), historyCursor: "", historyDone: false,
      historyLoading: false, historyWanted: false, historyTop: null, lastRefresh: 0, totalSeq: 0, refreshing: false, refreshAgain: false, reconnects: 0 });
    const gen = ++S.gen;
    showMessage("");
    $("feed").textContent = ""; $("timeline").textContent = ""; $("history").textContent = "";
    $("history-end").textContent = ""; $("summary").textContent = ""; $("facts").textContent = ""; $("input-result").textContent = "";
    $("snapshot-view").innerHTML = '<p class="muted">Pick a wake on the timeline to see the exact agent_tree_snapshot it carried.</p>';
    renderTree();
    if (!run) { setConn("idle", "no run picked"); return; }
    if (!S.token) { showMessage("Give a bearer token to read this run (the page sends it only to this gateway)."); setConn("idle", "no token"); return; }
    document.title = "canopy: " + run;
    remember(run);
    history.replaceState(null, "", location.pathname + "#run=" + encodeURIComponent(run));
    refresh(gen);
    loadHistory(gen);
    connect(gen);
  }

  function remember(run) {
    let recent = [];
    try { recent = JSON.parse(localStorage.getItem("canopy.recent") || "[]"); } catch { /* ignore */ }
    recent = [run, ...recent.filter((r) => r !== run)].slice(0, 20);
    localStorage.setItem("canopy.recent", JSON.stringify(recent));
    listRecent();
  }

  function listRecent() {
    let recent = [];
    try { recent = JSON.parse(localStorage.getItem("canopy.recent") || "[]"); } catch { /* ignore */ }
    const dl = $("recent-runs"); dl.textContent = "";
    for (const r of recent) { const o = document.createElement("option"); o.value = r; dl.append(o); }
  }

  // ---- the list of runs (GET /v1/runs, every projector's runs merged) ----
  async function loadRuns() {
    const sel = $("runs");
    if (!S.token) return;
    try {
      let after = ""; const refs = []; let complete = true;
      for (let i = 0; i < 5; i++) { // at most 5 pages of 200 in the picker
        const resp = await fetch("/v1/runs?limit=200" + (after ? "&after=" + encodeURIComponent(after) : ""), { headers: { Authorization: "Bearer " + S.token }, cache: "no-store" });
        if (!resp.ok) { sel.options[0].textContent = "(runs unavailable: " + (await problemOf(resp)) + ")"; return; }
        const l = await resp.json();
        refs.push(...l.runs); complete = complete && l.complete;
        if (!(after = l.next_after)) break;
      }
      sel.replaceChildren(new Option(refs.length ? "(pick one of " + refs.length + " runs" + (complete ? "" : "; some partitions did not answer") + ")" : "(no runs)", ""));
      for (const r of refs) {
        const o = new Option(r.run_id + " · " + r.as_of_event_seq + " events" + (r.as_of ? " · " + r.as_of.replace("T", " ").replace(/\.\d+Z$/, "Z") : ""), r.run_id);
        if (r.run_id === S.run) o.selected = true;
        sel.append(o);
      }
    } catch (e) { sel.options[0].textContent = "(runs unavailable: " + e.message + ")"; }
  }

  // ---- the read model and every node, paged ----
  // Refreshes start at most once a second: the gateway rate-limits each
  // token subject (10 requests/s by default), and the wakes already carry
  // what changed.
  const MIN_REFRESH_MS = 1000;
  function scheduleRefresh(gen, delay) {
    if (S.refreshTimer) return;
    const wait = Math.max(delay, MIN_REFRESH_MS - (Date.now() - (S.lastRefresh || 0)));
    S.refreshTimer = setTimeout(() => { S.refreshTimer = 0; refresh(gen); }, wait);
  }

  async function refresh(gen) {
    if (S.refreshing) { S.refreshAgain = true; return; }
    S.refreshing = true; S.lastRefresh = Date.now();
    try {
      const rm = await api("/read-model");
      if (gen !== S.gen) return;
      if (!rm.ok) { await runProblem(rm); return; }
      S.readModel = await rm.json();
      renderSummary();
      renderFacts();
      let cursor = "";
      const seen = new Set();
      for (;;) {
        const resp = await api("/nodes?limit=1000" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
        if (gen !== S.gen) return;
        if (!resp.ok) { await runProblem(resp); return; }
        const pg = await resp.json();
        if (pg.as_of_event_seq >= (S.totalSeq || 0)) { S.total = pg.total; S.totalSeq = pg.as_of_event_seq; }
        for (const n of pg.nodes) { seen.add(n.agent_id); merge(n, pg.as_of_event_seq, pg.stale); }
        heard(pg.as_of);
        renderTree();
        if (!pg.next_cursor) break;
        cursor = pg.next_cursor;
      }
      for (const id of [...S.nodes.keys()]) if (!seen.has(id) && !S.nodes.get(id)._fromWake) S.nodes.delete(id);
      renderTree();
      if ($("message").dataset.kind === "error" && !$("message").hidden) showMessage("");
      if (!S.historyLoading && S.historyTop != null) loadNewerHistory(gen);
    } catch (e) {
      if (gen === S.gen) { setConn("error", "cannot reach the gateway"); showMessage("The gateway cannot be reached: " + e.message + ". What you see may be out of date."); }
    } finally {
      S.refreshing = false;
      if (S.refreshAgain && gen === S.gen) { S.refreshAgain = false; scheduleRefresh(gen, 300); }
    }
  }

  async function runProblem(resp) {
    const detail = await problemOf(resp);
    if (resp.status === 404) showMessage("Unknown run \"" + S.run + "\": canopy has no event of it (wrong id, or not started yet). " + detail, "unknown");
    else if (resp.status === 410) showMessage("Run \"" + S.run + "\" has expired: its projection was dropped after the retention period. " + detail, "unknown");
    else if (resp.status === 401 || resp.status === 403) showMessage("Not allowed to read run \"" + S.run + "\" with this token: " + detail, "error");
    else if (resp.status === 429 || resp.status === 503) {
      const ra = Math.max(1, parseInt(resp.headers.get("Retry-After") || "2", 10));
      showMessage((resp.status === 429 ? "The gateway asks this page to slow down" : "Run \"" + S.run + "\" is unavailable right now") +
        " (" + resp.status + ": " + detail + "); retrying in " + ra + "s. What you see may be out of date.", "error");
      scheduleRefresh(S.gen, ra * 1000);
    } else showMessage("Run \"" + S.run + "\" is unavailable right now (" + resp.status + "): " + detail + " What you see may be out of date.", "error");
    if (resp.status === 404 || resp.status === 410) { S.nodes.clear(); S.total = 0; renderTree(); }
  }

  // merge takes a node view (from a nodes page) or a snapshot digest (from
  // a wake) unless the view already holds a newer fact of it.
  function merge(n, seq, stale, fromWake) {
    const cur = S.nodes.get(n.agent_id);
    if (cur && cur._seq > seq) return;
    const v = Object.assign({}, cur || {}, n, { _seq: seq, _stale: !!stale, _fromWake: !!fromWake && (!cur || cur._fromWake) });
    if (v.status == null) v.status = "unknown";
    if (v.role == null) v.role = "unknown";
    if (fromWake) {
      // A snapshot digest counts open requests and gives the lease's
      // remaining time; it does not list the ids or say "overdue".
      delete v.open_requests; delete v.lease_overdue;
      v._openCount = n.open_request_count;
    } else delete v._openCount;
    S.nodes.set(n.agent_id, v);
  }

  function heard(asOf) {
    S.lastHeard = Date.now();
    if (asOf && (!S.asOf || asOf > S.asOf)) S.asOf = asOf;
    renderFresh();
  }

  // ---- rendering the tree (virtualised: only the visible rows are in the DOM) ----
  function treeOrder() {
    const kids = new Map(); const roots = [];
    for (const n of S.nodes.values()) {
      const p = n.parent_agent_id;
      if (p && S.nodes.has(p)) { if (!kids.has(p)) kids.set(p, []); kids.get(p).push(n.agent_id); } else roots.push(n.agent_id);
    }
    const root = S.readModel && S.readModel.root_agent_id;
    roots.sort((a, b) => (a === root ? -1 : b === root ? 1 : a < b ? -1 : a > b ? 1 : 0));
    // Children in a plan of their parent come in its bands (plan, band,
    // step), each band under a band row; the others follow by id.
    const place = (id) => S.nodes.get(id).plan;
    const byPlan = (a, b) => {
      const pa = place(a), pb = place(b);
      if (pa && pb) return pa.plan_id < pb.plan_id ? -1 : pa.plan_id > pb.plan_id ? 1 : pa.band - pb.band || pa.step - pb.step || (a < b ? -1 : 1);
      if (pa || pb) return pa ? -1 : 1;
      return a < b ? -1 : a > b ? 1 : 0;
    };
    const out = []; const depth = new Map(); const markers = new Map();
    const stack = roots.slice().reverse().map((id) => [id, 0]);
    while (stack.length) {
      const [id, d] = stack.pop();
      if (markers.has(id)) { depth.set(id, d); out.push(id); continue; }
      if (depth.has(id)) continue;
      depth.set(id, d); out.push(id);
      const k = (kids.get(id) || []).sort(byPlan);
      const items = []; let last = "";
      for (const c of k) {
        const p = place(c);
        const key = p ? "\u0000band\u0000" + id + "\u0000" + p.plan_id + "\u0000" + p.band : "";
        if (p && key !== last) {
          markers.set(key, { plan: p, steps: k.filter((x) => { const q = place(x); return q && q.plan_id === p.plan_id && q.band === p.band; }).length });
          items.push(key); last = key;
        }
        items.push(c);
      }
      for (let i = items.length - 1; i >= 0; i--) stack.push([items[i], d + 1]);
    }
    S.depth = depth; S.markers = markers;
    return out;
  }

  // Wakes replayed in a burst (a stream opened at 0.0) re-render once a frame.
  let renderPending = false;
  function scheduleRender() {
    if (renderPending) return;
    renderPending = true;
    requestAnimationFrame(() => { renderPending = false; renderTree(); });
  }

  function renderTree() {
    S.order = treeOrder();
    const shown = S.nodes.size;
    $("tree-count").textContent = S.total == null ? (shown ? "(" + shown + " nodes from wakes; the full list is loading)" : "")
      : "(" + shown + (S.total !== shown ? " of " + S.total : "") + " nodes)";
    paintRows();
  }

  S.paint = () => paintRows();
  S.rerender = () => renderTree();
  function paintRows() {
    const box = $("tree-scroll"); const body = $("tree-body");
    const n = S.order.length;
    const first = Math.max(0, Math.floor(box.scrollTop / ROW) - 10);
    const last = Math.min(n, first + Math.ceil((box.clientHeight || 600) / ROW) + 20);
    const frag = document.createDocumentFragment();
    const spacer = (h) => { const tr = document.createElement("tr"); tr.className = "spacer"; tr.setAttribute("aria-hidden", "true"); tr.style.height = h + "px"; return tr; };
    if (first > 0) frag.append(spacer(first * ROW));
    const now = Date.now();
    for (let i = first; i < last; i++) {
      const id = S.order[i];
      frag.append(S.markers.has(id) ? bandRow(id) : row(S.nodes.get(id), now));
    }
    if (last < n) frag.append(spacer((n - last) * ROW));
    if (n === 0) {
      const tr = document.createElement("tr"); const td = document.createElement("td"); td.colSpan = 6; td.className = "muted";
      td.textContent = S.run ? "No nodes to show." : "Pick a run to watch."; tr.append(td); frag.append(tr);
    }
    body.replaceChildren(frag);
  }

  function bandRow(key) {
    const m = S.markers.get(key); const p = m.plan;
    const tr = document.createElement("tr"); tr.className = "band";
    const td = document.createElement("td"); td.colSpan = 6;
    td.style.paddingLeft = (0.4 + 1.1 * (S.depth.get(key) || 0)) + "em";
    td.textContent = "plan " + p.plan_id + " · band " + (p.band + 1) + " of " + p.band_count + (p.parallelizable ? " · parallel" : " · sequential") + " · " + m.steps + " step" + (m.steps === 1 ? "" : "s") + " here";
    tr.append(td);
    return tr;
  }

  function cell(tr, text, cls, title) {
    const td = document.createElement("td"); td.textContent = text;
    if (cls) td.className = cls; if (title) td.title = title; tr.append(td); return td;
  }

  function row(n, now) {
    const tr = document.createElement("tr");
    tr.dataset.agent = n.agent_id; tr.dataset.status = n.status;
    const marks = [];
    if (n.status === "blocked" || n.status === "failed") marks.push(n.status);
    const name = document.createElement("td"); name.className = "node";
    name.style.paddingLeft = (0.4 + 1.1 * (S.depth.get(n.agent_id) || 0)) + "em";
    name.textContent = n.agent_id; tr.append(name);
    const stale = n._stale ? " (stale)" : "";
    const st = cell(tr, n.status + stale, "st st-" + n.status + (n._stale ? " stale" : ""));
    st.dataset.testStatus = n.status;
    cell(tr, n.role, n.role === "unknown" ? "unknown" : "");
    // Lease and its remaining time, on the wall clock.
    if (n.lease_expires_at) {
      const left = Date.parse(n.lease_expires_at) - now;
      let text; let cls = "lease";
      if (n.lease_overdue || left <= 0) { text = "expired" + (n.lease_overdue ? ", not renewed" : ""); cls += " lease-over"; marks.push("lease expired"); }
      else { text = fmtDur(left) + " left"; if (left < NEAR_EXPIRY_MS) { cls += " lease-near"; marks.push("lease near expiry"); } }
      cell(tr, text + (n.lease_owner ? " · " + n.lease_owner : ""), cls, "lease expires at " + n.lease_expires_at);
    } else cell(tr, "none held", "muted");
    const reqs = n.open_requests ? n.open_requests.length : n._openCount;
    if (reqs == null) cell(tr, "unknown", "unknown");
    else cell(tr, reqs ? String(reqs) + (n.open_requests && reqs ? ": " + n.open_requests.slice(0, 3).join(", ") : "") : "0", reqs ? "req" : "muted");
    if (n.last_signal_kind) cell(tr, n.last_signal_kind + (n.last_signal_at ? " · " + ago(n.last_signal_at, now) : ""), "", n.last_signal_at || "");
    else cell(tr, "none seen", "muted");
    if (marks.length) { tr.classList.add("flag"); tr.setAttribute("aria-label", n.agent_id + ": " + marks.join(", ")); }
    return tr;
  }

  function fmtDur(ms) {
    const s = Math.round(ms / 1000);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  }
  function ago(t, now) { const d = now - Date.parse(t); return isNaN(d) ? t : d < 0 ? "in " + fmtDur(-d) : fmtDur(d) + " ago"; }

  function renderSummary() {
    const m = S.readModel; const box = $("summary"); box.textContent = "";
    if (!m) return;
    const dl = document.createElement("dl");
    const add = (k, v, cls) => { const dt = document.createElement("dt"); dt.textContent = k; const dd = document.createElement("dd"); dd.textContent = v; if (cls) dd.className = cls; dl.append(dt, dd); };
    const st = m.status || {};
    add("Run status", st.status === "known" || st.status === "stale" ? st.value + (st.status === "stale" ? " (stale)" : "") : st.status + (st.reason ? ": " + st.reason : ""),
      "st st-" + (st.value || "unknown"));
    add("Nodes", String(m.counts.nodes));
    const bs = m.counts.by_status || {};
    add("By status", Object.keys(bs).filter((k) => bs[k]).map((k) => k + " " + bs[k]).join(", ") || "none");
    add("Open requests", String(m.counts.open_requests));
    add("Overdue leases", String(m.counts.overdue_leases), m.counts.overdue_leases ? "lease-over" : "");
    add("Events applied", String(m.as_of_event_seq));
    add("Projection", m.stale ? "stale: behind its input log" : "caught up", m.stale ? "stale" : "");
    box.append(dl);
  }

  // ---- the runtime's activity: the read model's facts (seed 003) ----
  // Each fact is {status, value, reason}. A fact that is not known shows
  // its status and reason, never an empty value that looks healthy; a stale
  // or blocked one shows its value and says why.
  const MAX_REFS = 3; // entries of a list shown in a card; the rest are counted
  function renderFacts() {
    const m = S.readModel; const box = $("facts"); box.textContent = "";
    if (!m) return;
    box.append(turnsCard(m), toolsCard(m), approvalsCard(m), artifactsCard(m), modelCard(m), processesCard(m),
      incidentsCard(m), progressCard(m), checksCard(m));
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e;
  }
  function card(title, ...parts) { const s = el("section", "fact-card"); s.append(el("h3", "", title), ...parts); return s; }
  function line(label, ...parts) { const d = el("div", "line"); d.append(el("span", "lbl", label + ":"), " ", ...parts); return d; }

  // fact renders one fact: show(value) when it has one (show gets null for
  // a fact known to be none), and its status and reason unless it is known.
  function fact(name, f, show) {
    const d = el("div", "fact");
    f = f || { status: "unknown", value: null, reason: "this read model does not have the fact" };
    d.dataset.fact = name; d.dataset.status = f.status;
    if (f.status === "known" || f.status === "stale" || f.status === "blocked") d.append(...[].concat(show(f.value)));
    if (f.status !== "known") d.append(el("div", "why why-" + f.status, f.status.replace("_", " ") + (f.reason ? ": " + f.reason : "")));
    return d;
  }

  // refs lists the first MAX_REFS items and counts the rest (of total).
  function refs(items, text, total, none) {
    if (!items.length) return el("span", "muted", none);
    const ul = el("ul", "refs");
    for (const x of items.slice(0, MAX_REFS)) ul.append(el("li", "", text(x)));
    const more = Math.max(total ?? items.length, items.length) - Math.min(items.length, MAX_REFS);
    if (more > 0) ul.append(el("li", "muted", "… " + more + " more"));
    return ul;
  }
  const clock = (t) => (t ? t.slice(11, 19) : "?");
  const tally = (o) => Object.entries(o || {}).map(([k, n]) => k + " " + n).join(", ");

  function turnsCard(m) {
    const active = ((m.active_turns || {}).value || {}).turns || [];
    return card("Turns",
      line("Active", fact("active_turn_id", m.active_turn_id, (id) => {
        if (id == null) return "none";
        const t = active.find((x) => x.turn_id === id);
        return id + (t ? " · " + t.agent_id + " · since " + clock(t.at) + ", last life " + clock(t.last_activity_at) : "") +
          (active.length > 1 ? " (" + active.length + " active)" : "");
      })),
      line("Queued", fact("queued_turns", m.queued_turns, (v) => (v.total ? v.turns.map((t) => t.turn_id).join(", ") + (v.truncated ? " … " + v.total + " in all" : "") : "none"))),
      line("Last outcome", fact("last_outcome", m.last_outcome, (o) => (o == null ? "no turn has ended yet"
        : [el("span", "oc-" + o.outcome, o.outcome), " · " + o.turn_id + (o.error_code ? " · " + o.error_code : "") + (o.summary ? ": " + o.summary : "")]))));
  }

  function callText(c) {
    let s = (c.tool_name || "(tool not seen)") + " · " + c.call_id + " · " + c.agent_id + (c.command ? " · " + c.command : "");
    if (c.outcome) s += " · " + c.outcome + (c.error_code ? " " + c.error_code : "") + (c.exit_code != null ? " (exit " + c.exit_code + ")" : "") + (c.output_ref ? " · output " + c.output_ref : "");
    else if (c.started_at) s += " · since " + clock(c.started_at);
    return s;
  }
  function toolsCard(m) {
    return card("Tools and commands", fact("tool_summary", m.tool_summary, (v) => [
      el("div", "", v.started + " calls · " + v.running + " running · " + v.failed_tools + " failed tools · " + v.failed_commands + " failed commands"),
      line("By tool", v.by_tool.length ? v.by_tool.map((c) => c.tool_name + " " + c.calls + (c.failed ? " (" + c.failed + " failed)" : "")).join(", ") : "none"),
      line("Running", refs(v.running_calls, callText, v.running, "none")),
      line("Failed", refs(v.recent_failed, callText, null, "none"))]));
  }

  function approvalsCard(m) {
    return card("Approvals and permissions",
      line("Pending approvals", fact("pending_approvals", m.pending_approvals, (v) =>
        refs(v.requests, (q) => q.request_id + " · " + q.agent_id + (q.expires_at ? " · expires " + clock(q.expires_at) : ""), v.total, "none"))),
      line("Permissions", fact("permission_state", m.permission_state, (v) => (v.permission_mode || "mode not reported") + " · network " +
        (v.network_access == null ? "not reported" : v.network_access ? "allowed" : "off") + " · " + v.pending_approvals + " approval(s) waiting")),
      line("Sandbox", fact("sandbox_profile", m.sandbox_profile, (v) => v)),
      line("Environment", fact("execution_environment", m.execution_environment, (v) => v.environment + (v.environment_ref ? " · " + v.environment_ref : "") + " (" + v.source + ")")));
  }

  function artifactsCard(m) {
    return card("Artifacts and evidence",
      fact("artifact_summary", m.artifact_summary, (v) => [
        el("div", "", v.total + " artifacts" + (v.total ? " (" + tally(v.by_type) + ")" : "")),
        v.dangling_refs ? el("div", "warn", v.dangling_refs + " reference(s) to artifacts the run has not seen") : "",
        refs(v.recent, (a) => a.artifact_id + " · " + a.artifact_type + (a.label ? " · " + a.label : "") + (a.is_primary ? " · primary" : "") + " · " + a.agent_id, v.total, "")]),
      fact("evidence_summary", m.evidence_summary, (v) => [
        el("div", "", v.total + " evidence" + (v.total ? " (" + tally(v.by_verdict) + ")" : "")),
        refs(v.recent, (e) => e.evidence_id + " · " + e.evidence_kind + (e.verdict ? " · " + e.verdict : "") + (e.artifact_id ? " · on " + e.artifact_id : "") + (e.ref ? " · " + e.ref : ""), v.total, "")]));
  }

  function modelCard(m) {
    return card("Model and limits",
      fact("model_routing", m.model_routing, (v) => {
        const l = v.latest, t = v.totals;
        return [line("Latest", l.model + (l.provider ? " · " + l.provider : "") + (l.profile ? " · profile " + l.profile : "") + " · " + l.agent_id),
          line("Usage", t.calls + " calls · " + t.input_tokens + " in / " + t.output_tokens + " out / " + t.cached_tokens + " cached tokens · $" + (t.cost_micros / 1e6).toFixed(4)),
          line("By model", v.by_model.map((c) => c.model + " " + c.calls).join(", "))];
      }),
      line("Limits", fact("limit_state", m.limit_state, (v) => refs(v, (x) => x.limit_kind + ": " + x.state + (x.remaining != null ? " · " + x.remaining + " left" : "") +
        (x.reset_at ? " · resets " + clock(x.reset_at) : ""), null, "none"))));
  }

  function processText(p) {
    return p.process_id + (p.command ? " · " + p.command : "") + (p.environment ? " · " + p.environment : "") +
      (p.exited_at ? " · " + (p.signal ? "signal " + p.signal : "exit " + (p.exit_code ?? "?")) : "") + (p.output_ref ? " · output " + p.output_ref : "");
  }
  function processesCard(m) {
    return card("Processes", fact("active_processes", m.active_processes, (v) => [
      el("div", "", v.total + " running · " + v.started + " started · " + v.exited + " exited · " + v.failed + " failed"),
      line("Running", refs(v.running, processText, v.total, "none")),
      line("Exited", refs(v.recent_exited, processText, null, "none"))]));
  }

  function incidentsCard(m) {
    return card("Incidents", fact("active_incidents", m.active_incidents, (v) => [
      el("div", "", v.total + " open · " + v.opened + " opened · " + v.resolved + " resolved"),
      refs(v.incidents, (i) => i.severity + " · " + i.incident_kind + (i.title ? ": " + i.title : "") + " · " + i.agent_id + " · since " + clock(i.opened_at), v.total, "")]));
  }

  function progressCard(m) {
    return card("Progress, context, channels",
      line("Job progress", fact("job_progress", m.job_progress, (v) => v.completed + " of " + v.steps + " steps completed (" + Math.round(v.fraction * 100) + "%) · " +
        v.running + " running · " + v.failed + " failed · " + v.plans + " plan(s)" + (v.truncated ? " · counted in part" : ""))),
      line("Compaction", fact("latest_compaction_boundary", m.latest_compaction_boundary, (b) => (b == null ? "none"
        : b.boundary_id + (b.through_turn_id ? " through " + b.through_turn_id : "") + (b.tokens_before ? " · " + b.tokens_before + " → " + b.tokens_after + " tokens" : "") + " · " + clock(b.at)))),
      line("Channels", fact("remote_channel_state", m.remote_channel_state, (v) => (v.length ? v.map((c) => c.channel_id + " (" + c.channel_kind + ") " + c.state).join(", ") : "none"))),
      line("Traces", fact("telemetry_correlation", m.telemetry_correlation, (v) => (v.latest_trace_id || "none") + " · " + v.traced_events + " of " + v.events + " events traced")));
  }

  const CHECKS = [["warnings", "Warnings"], ["failed_tools", "Failed tools"], ["failed_commands", "Failed commands"], ["pending_requests", "Pending requests"],
    ["stalled_turns", "Stalled turns"], ["stalled_tasks", "Stalled tasks"], ["lost_workers", "Lost workers"], ["interrupt_state", "Interrupt"],
    ["quota_blocks", "Quota blocks"], ["context_gaps", "Context gaps"]];
  function checksCard(m) {
    const c = (m.diagnostics || {}).checks || {};
    return card("Diagnostics", ...CHECKS.map(([k, label]) => line(label, fact("checks." + k, c[k], (v) =>
      el("span", (k === "interrupt_state" ? v === "pending" : k !== "context_gaps" && v > 0) ? "warn" : "", String(v))))));
  }

  // ---- freshness ----
  function renderFresh() {
    const f = $("fresh");
    if (!S.lastHeard) { f.dataset.state = "none"; f.textContent = "nothing shown yet"; return; }
    const age = Date.now() - S.lastHeard;
    const state = age > STALE_MS ? "stale" : "fresh";
    f.dataset.state = state;
    f.textContent = "last update " + fmtDur(age) + " ago" + (S.asOf ? " · run clock " + S.asOf.replace("T", " ").replace(/\.\d+Z$/, "Z") : "") + (state === "stale" ? " (may be out of date)" : "");
  }

  function setConn(state, text) { const c = $("conn"); c.dataset.state = state; c.textContent = text; }

  // ---- the wake stream: fetch-based SSE (EventSource cannot send Authorization) ----
  async function connect(gen) {
    const ac = new AbortController(); S.stream = ac;
    setConn("connecting", S.reconnects ? "reconnecting…" : "connecting…");
    let retry = 1000;
    try {
      const resp = await api("/wakes", { headers: { Accept: "text/event-stream", "Last-Event-ID": S.lastEventId }, signal: ac.signal });
      if (gen !== S.gen) return;
      if (!resp.ok) {
        if (resp.status === 404 || resp.status === 410 || resp.status === 401 || resp.status === 403) { await runProblem(resp); setConn("error", "not streaming"); return; }
        const ra = parseInt(resp.headers.get("Retry-After") || "", 10);
        if (ra > 0) retry = ra * 1000;
        throw new Error(resp.status + " " + (await problemOf(resp)));
      }
      setConn("live", "live");
      const rd = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = ""; let ev = { event: "message", data: [], id: null };
      for (;;) {
        const { value, done } = await rd.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.search(/\r?\n/)) >= 0) {
          const line = buf.slice(0, i); buf = buf.slice(buf[i] === "\r" ? i + 2 : i + 1);
          if (line === "") { dispatch(ev, gen); ev = { event: "message", data: [], id: null }; continue; }
          if (line[0] === ":") { heardStream(); continue; }
          const c = line.indexOf(":"); const k = c < 0 ? line : line.slice(0, c);
          let v = c < 0 ? "" : line.slice(c + 1); if (v[0] === " ") v = v.slice(1);
          if (k === "event") ev.event = v; else if (k === "data") ev.data.push(v); else if (k === "id") ev.id = v;
          else if (k === "retry" && /^\d+$/.test(v)) retry = +v;
        }
      }
    } catch (e) {
      if (ac.signal.aborted || gen !== S.gen) return;
      setConn("error", "disconnected: " + e.message);
    }
    if (ac.signal.aborted || gen !== S.gen) return;
    S.reconnects++;
    setConn("connecting", "reconnecting in " + Math.round(retry / 1000) + "s from " + S.lastEventId);
    setTimeout(() => { if (gen === S.gen) connect(gen); }, retry);
  }

  function heardStream() { if (S.stream) { S.lastStreamAt = Date.now(); } }

  function dispatch(ev, gen) {
    if (gen !== S.gen) return;
    if (ev.id != null && /^\d+\.\d+$/.test(ev.id)) S.lastEventId = ev.id;
    const data = ev.data.join("\n");
    if (ev.event === "wake") {
      let w; try { w = JSON.parse(data); } catch { return; }
      onWake(w, gen);
    } else if (ev.event === "dropped" || ev.event === "token_expired") {
      let d = {}; try { d = JSON.parse(data); } catch { /* ignore */ }
      setConn("error", ev.event === "token_expired" ? "token expired" : "fell behind; resuming");
      if (ev.event === "token_expired") showMessage("The bearer token expired: give a new one and open the run again (the view resumes at " + (d.position || S.lastEventId) + ").");
    } else if (ev.event === "open") heardStream();
  }

  function onWake(w, gen) {
    const at = Date.now(); const pnow = performance.now();
    w._received = at;
    const snap = w.agent_tree_snapshot || {};
    for (const n of snap.nodes || []) merge(n, snap.as_of_event_seq || 0, snap.stale, true);
    // The snapshot's total is newer than the last node listing's when its seq is.
    if (snap.summary && (snap.as_of_event_seq || 0) > (S.totalSeq || 0)) { S.total = snap.summary.node_count_total; S.totalSeq = snap.as_of_event_seq; }
    heard(snap.generated_at);
    S.wakes.push(w);
    if (S.wakes.length > MAX_TIMELINE) { S.wakes.shift(); S.dropped++; }
    addTimeline(w);
    addFeed(w, at);
    // The result of a human input sent from this page: the priority wake
    // whose trigger is its event.
    // The wake may overtake the 202's body: remember when each input's wake came.
    for (const t of w.triggers || []) {
      if (t.kind !== "human_input" || !t.event_id) continue;
      if (S.pending.has(t.event_id)) { woken(w, pnow - S.pending.get(t.event_id)); S.pending.delete(t.event_id); }
      else { S.inputWakes.set(t.event_id, { w, at: pnow }); if (S.inputWakes.size > 200) S.inputWakes.delete(S.inputWakes.keys().next().value); }
    }
    scheduleRender();
    // The wake names what changed; the full tree follows shortly after.
    scheduleRefresh(gen, 300);
  }

  function woken(w, ms) {
    ms = Math.round(ms);
    const r = $("input-result"); r.dataset.state = "woken";
    r.textContent = "Priority wake " + w.wake_id + " arrived " + ms + " ms after sending (end to end: gateway, Kafka, projector, wake topic, stream).";
    r.dataset.latency = ms; r.dataset.wake = w.wake_id;
  }

  function trigText(t) {
    let s = t.kind + " · " + t.agent_id;
    if (t.detail) s += " · " + t.detail;
    if (t.input) s += " · " + t.input.input_kind + (t.input.text ? ": " + t.input.text : "");
    return s;
  }

  function addFeed(w, at) {
    const li = document.createElement("li");
    const prio = w.lane === "priority";
    li.className = prio ? "wake prio" : "wake"; li.dataset.wake = w.wake_id; li.dataset.lane = w.lane;
    const h = document.createElement("div"); h.className = "wake-head";
    h.textContent = (prio ? "PRIORITY wake " : "wake ") + w.wake_id.slice(-8) + " · " + new Date(at).toLocaleTimeString();
    li.append(h);
    const ul = document.createElement("ul");
    for (const t of w.triggers || []) { const x = document.createElement("li"); x.className = "trig trig-" + t.kind; x.textContent = trigText(t); ul.append(x); }
    li.append(ul);
    const feed = $("feed"); feed.prepend(li);
    while (feed.children.length > MAX_FEED) feed.lastChild.remove();
  }

  function addTimeline(w) {
    const sel = $("timeline");
    const o = document.createElement("option");
    o.value = w.wake_id;
    const s = w.agent_tree_snapshot || {}; const sm = s.summary || {};
    o.textContent = (w.lane === "priority" ? "★ " : "") + (s.generated_at || "").replace("T", " ").replace(/Z$/, "") + " · " +
      (w.triggers || []).map((t) => t.kind).join(", ") + " · " + (sm.node_count_included ?? "?") + "/" + (sm.node_count_total ?? "?") + " nodes" + (s.truncated ? " · truncated" : "");
    sel.append(o);
    if (S.dropped && sel.options.length > MAX_TIMELINE) sel.options[0].remove();
    $("timeline-count").textContent = "(" + S.wakes.length + " wakes" + (S.dropped ? ", " + S.dropped + " older ones dropped from this view" : "") + ")";
  }

  // ---- what the conductor saw ----
  function showSnapshot(id) {
    const w = S.wakes.find((x) => x.wake_id === id); const box = $("snapshot-view");
    box.textContent = "";
    if (!w) { box.textContent = "That wake is no longer in this view."; return; }
    const s = w.agent_tree_snapshot || {}; const sm = s.summary || {}; const tm = s.truncation_meta || {};
    const h = document.createElement("h3"); h.id = "snap-title";
    h.textContent = "Wake " + w.wake_id + " (" + w.lane + " lane)"; box.append(h);
    const dl = document.createElement("dl"); dl.className = "snap-meta";
    const add = (k, v, cls) => { const dt = document.createElement("dt"); dt.textContent = k; const dd = document.createElement("dd"); dd.textContent = v; if (cls) dd.className = cls; dl.append(dt, dd); };
    add("Snapshot", s.snapshot_id || "none");
    add("Generated", (s.generated_at || "?") + " (age " + (s.snapshot_age_ms ?? "?") + " ms)");
    add("Events applied", String(s.as_of_event_seq ?? "?"));
    add("Included", (sm.node_count_included ?? "?") + " of " + (sm.node_count_total ?? "?") + " nodes");
    add("Omitted", String(tm.omitted_count_total ?? 0) + (tm.omitted_by_status ? " (" + Object.entries(tm.omitted_by_status).filter(([, v]) => v).map(([k, v]) => k + " " + v).join(", ") + ")" : ""));
    add("Truncated", s.truncated ? "yes, policy " + (tm.policy_version || "?") + (tm.byte_budget ? ", byte budget " + tm.byte_budget : "") : "no", s.truncated ? "warn" : "");
    add("Stale", s.stale ? "yes: the projection was behind its input when it was built" : "no", s.stale ? "stale" : "");
    const trigs = w.triggers || []; const kinds = {};
    for (const t of trigs) kinds[t.kind] = (kinds[t.kind] || 0) + 1;
    add("Triggers", trigs.length + ": " + Object.entries(kinds).map(([k, v]) => k + " " + v).join(", "));
    box.append(dl);
    if (trigs.length) {
      const det = document.createElement("details"); const sum = document.createElement("summary");
      sum.textContent = "Every trigger of this wake"; det.append(sum);
      const ul = document.createElement("ul"); ul.className = "trig-list";
      for (const t of trigs) { const li = document.createElement("li"); li.textContent = trigText(t); ul.append(li); }
      det.append(ul); box.append(det);
    }
    const t = document.createElement("table"); t.className = "tree snap";
    const cap = document.createElement("caption"); cap.className = "vh"; cap.textContent = "The nodes the snapshot included"; t.append(cap);
    t.insertAdjacentHTML("beforeend", '<thead><tr><th scope="col">Node</th><th scope="col">Status then</th><th scope="col">Status now</th><th scope="col">Role</th><th scope="col">Lease left then</th><th scope="col">Open requests</th></tr></thead>');
    const tb = document.createElement("tbody");
    for (const n of s.nodes || []) {
      const tr = document.createElement("tr"); tr.dataset.agent = n.agent_id;
      cell(tr, n.agent_id, "node");
      cell(tr, n.status || "unknown", "st st-" + (n.status || "unknown"));
      const now = S.nodes.get(n.agent_id);
      cell(tr, now ? now.status : "not in the live view", now ? "st st-" + now.status : "muted");
      cell(tr, n.role || "unknown");
      cell(tr, n.lease_remaining_ms != null ? fmtDur(n.lease_remaining_ms) : "none");
      cell(tr, String(n.open_request_count ?? "unknown"));
      tb.append(tr);
    }
    t.append(tb);
    const sc = document.createElement("div"); sc.className = "snap-scroll"; sc.tabIndex = 0;
    sc.setAttribute("aria-label", "The snapshot's nodes (scrollable)"); sc.append(t); box.append(sc);
  }

  // ---- history, newest first, older pages through the cursors ----
  // A scroll that asks for older history while a page is loading (the
  // first page, an older one, or the newest entries after a wake) is
  // served when that load ends: a scroll event comes once, and dropping it
  // would leave the history stuck until the next scroll.
  async function loadHistory(gen) {
    if (S.historyDone) return;
    if (S.historyLoading) { S.historyWanted = true; return; }
    S.historyLoading = true; S.historyWanted = false;
    try {
      const resp = await api("/history?limit=50" + (S.historyCursor ? "&cursor=" + encodeURIComponent(S.historyCursor) : ""));
      if (gen !== S.gen) return;
      if (!resp.ok) { $("history-end").textContent = "History unavailable: " + (await problemOf(resp)); return; }
      const pg = await resp.json();
      if (S.historyTop == null && pg.entries.length) S.historyTop = pg.entries[0].seq;
      for (const e of pg.entries) $("history").append(histItem(e));
      S.historyCursor = pg.next_cursor;
      if (!pg.next_cursor) {
        S.historyDone = true;
        $("history-end").textContent = pg.truncated ? "Older events are no longer kept (the window holds " + pg.window_size + " entries)." : "The run's first event.";
        $("history-more").hidden = true;
      }
    } catch (e) {
      if (gen === S.gen) $("history-end").textContent = "History unavailable: " + e.message;
    } finally { S.historyLoading = false; olderIfWanted(gen); }
  }

  function olderIfWanted(gen) {
    if (S.historyWanted && gen === S.gen) { S.historyWanted = false; loadHistory(gen); }
  }

  async function loadNewerHistory(gen) {
    S.historyLoading = true;
    try {
      const resp = await api("/history?limit=50");
      if (gen !== S.gen || !resp.ok) return;
      const pg = await resp.json();
      const fresh = pg.entries.filter((e) => e.seq > S.historyTop);
      const list = $("history");
      for (let i = fresh.length - 1; i >= 0; i--) list.prepend(histItem(fresh[i]));
      if (fresh.length) S.historyTop = fresh[0].seq;
    } catch { /* the next wake tries again */ } finally { S.historyLoading = false; olderIfWanted(gen); }
  }

  function histItem(e) {
    const li = document.createElement("li"); li.dataset.seq = e.seq;
    li.textContent = "#" + e.seq + " " + e.at.replace("T", " ").replace(/Z$/, "") + " · " + e.type + " · " + e.agent_id + (e.status ? " → " + e.status : "");
    return li;
  }

  // ---- human input ----
  async function sendInput(ev) {
    ev.preventDefault();
    if (!S.run) { showMessage("Pick a run first."); return; }
    const kind = $("input-kind").value; const text = $("input-text").value;
    const body = { input_kind: kind }; if (text) body.text = text;
    const r = $("input-result"); r.dataset.state = "sending"; r.textContent = "Sending…";
    const t0 = performance.now();
    try {
      const resp = await api("/input", { method: "POST", headers: { "Content-Type": "application/json", "Idempotency-Key": crypto.randomUUID() }, body: JSON.stringify(body) });
      if (!resp.ok) { r.dataset.state = "error"; r.textContent = "Not accepted (" + resp.status + "): " + (await problemOf(resp)); return; }
      const acc = await resp.json();
      r.dataset.state = "accepted"; r.dataset.event = acc.event_id;
      r.textContent = "Accepted as " + acc.event_id + " in " + Math.round(performance.now() - t0) + " ms; waiting for its priority wake…";
      $("input-text").value = "";
      const early = S.inputWakes.get(acc.event_id);
      if (early) { S.inputWakes.delete(acc.event_id); woken(early.w, early.at - t0); } else S.pending.set(acc.event_id, t0);
    } catch (e) { r.dataset.state = "error"; r.textContent = "Not sent: " + e.message; }
  }

  // ---- wiring ----
  document.addEventListener("DOMContentLoaded", () => {
    const run = readFragment();
    $("token").value = S.token; $("run").value = run;
    listRecent();
    $("pick").addEventListener("submit", (e) => {
      e.preventDefault();
      S.token = $("token").value.trim();
      if (S.token) sessionStorage.setItem("canopy.token", S.token);
      openRun($("run").value.trim());
      loadRuns();
    });
    $("input-form").addEventListener("submit", sendInput);
    $("runs").addEventListener("change", (e) => { if (e.target.value) { $("run").value = e.target.value; openRun(e.target.value); } });
    $("runs-reload").addEventListener("click", loadRuns);
    loadRuns();
    $("timeline").addEventListener("change", (e) => showSnapshot(e.target.value));
    $("tree-scroll").addEventListener("scroll", () => requestAnimationFrame(paintRows), { passive: true });
    $("history-more").addEventListener("click", () => loadHistory(S.gen));
    const hs = $("history-scroll");
    hs.addEventListener("scroll", () => { if (hs.scrollTop + hs.clientHeight > hs.scrollHeight - 40) loadHistory(S.gen); }, { passive: true });
    // Lease countdowns and the freshness indicator move with the clock.
    setInterval(() => { renderFresh(); if (S.order.length) paintRows(); }, 1000);
    if (run) openRun(run); else setConn("idle", "no run picked");
  });
})();
