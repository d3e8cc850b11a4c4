// canopy's session page: /ui/?session=<id>. A client of the API like the
// run page (app.js), with the same token (sessionStorage), kept apart from
// it: with a session in the address the run page is hidden and this one
// shown. It loads in seed 003's order ("History windows"): the session
// shell and its threads, the recent history, the active thread's read
// model, its queue and pending requests; tools, artifacts, evidence, task
// graphs, subagents and older history on demand. Facts the projection does
// not have are shown as such (seed 003), and an answer that misses
// partitions says which.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const session = new URLSearchParams(location.search).get("session") || "";
  // The fragment as it is now: app.js removes it once the page has loaded.
  const fragToken = new URLSearchParams(location.hash.slice(1)).get("token");
  const V = { session, token: "", stages: [], snap: null, runsCursor: "", activeRun: "", readModel: null, historyCursor: "", historyLoading: false };
  window.canopySession = V; // for tests and the curious: the page's state and the order its parts loaded in

  const enc = encodeURIComponent;
  const base = () => "/v1/sessions/" + enc(V.session);
  const get = (path) => fetch(path, { headers: { Authorization: "Bearer " + V.token }, cache: "no-store" });
  const el = (tag, text, cls) => { const e = document.createElement(tag); if (text != null) e.textContent = text; if (cls) e.className = cls; return e; };
  const when = (t) => (t ? t.replace("T", " ").replace(/\.\d+Z$/, "Z") : "unknown");

  async function problemOf(resp) {
    try { const p = await resp.json(); return resp.status + ": " + (p.detail || p.title); } catch { return resp.status + " " + resp.statusText; }
  }

  function setState(text, kind) { const s = $("session-state"); s.textContent = text; s.dataset.kind = kind || ""; }

  // stage records that a part of the page loaded, in order.
  function stage(name) { V.stages.push(name); $("session-view").dataset.stages = V.stages.join(" "); }

  // fact shows a read-model fact honestly: its value when known, else its
  // status and reason.
  function fact(f, show) {
    if (!f) return "unknown";
    if (f.value == null) return f.status === "known" ? "none" : f.status + (f.reason ? " (" + f.reason + ")" : "");
    const v = show ? show(f.value) : String(f.value);
    return f.status === "known" ? v : v + " (" + f.status + (f.reason ? ": " + f.reason : "") + ")";
  }

  function runLink(id) {
    const a = el("a", id); a.href = "./#run=" + enc(id); a.dataset.run = id; return a;
  }

  function row(cells) {
    const tr = el("tr");
    for (const c of cells) { const td = el("td"); if (c instanceof Node) td.append(c); else td.textContent = c; tr.append(td); }
    return tr;
  }

  function dl(box, pairs) {
    box.textContent = "";
    for (const [k, v, cls] of pairs) { box.append(el("dt", k)); box.append(el("dd", v, cls)); }
  }

  // ---- 1. the shell and the threads ----
  async function loadShell() {
    const resp = await get(base() + "?history_limit=0");
    if (!resp.ok) {
      const why = await problemOf(resp);
      setState(resp.status === 404 ? "Unknown session \"" + V.session + "\": no run of it was projected. " + why
        : resp.status === 403 ? "Not allowed to read session \"" + V.session + "\" with this token: " + why
          : "Session \"" + V.session + "\" is unavailable right now (" + why + ").", resp.status === 404 ? "unknown" : "error");
      return false;
    }
    const s = V.snap = await resp.json();
    const notes = [];
    if (!s.complete) notes.push("Partitions " + s.unavailable_partitions.join(", ") + " did not answer: their runs are missing, not absent.");
    if (s.stale) notes.push("A projector is behind its input: facts may not be current.");
    if (s.truncated) notes.push("Some lists stop at their bound.");
    setState(notes.join(" "), notes.length ? "warn" : "");
    dl($("session-shell"), [
      ["Title", s.title ?? "unknown (no session.updated event)", s.title == null ? "unknown" : ""],
      ["Workspace", s.workspace_id ?? "unknown", s.workspace_id == null ? "unknown" : ""],
      ["Account", s.account_id ?? "unknown", s.account_id == null ? "unknown" : ""],
      ["First event", s.first_event_at ? when(s.first_event_at) : "unknown", s.first_event_at ? "" : "unknown"],
      ["Last event", when(s.last_event_at)],
      ["Runs", String(s.runs_total) + (s.complete ? "" : " (in the partitions that answered)")],
      ["Active threads", s.active_thread_ids.length ? s.active_thread_ids.join(", ") : "none"],
      ["Pinned threads", s.pinned_thread_ids.length ? s.pinned_thread_ids.join(", ") : "none"],
    ]);
    const tb = $("session-threads").tBodies[0]; tb.textContent = "";
    for (const t of s.threads) {
      const tr = row([(t.pinned ? "★ " : "") + (t.thread_id ?? "(no thread)"), t.active ? "active" : "", String(t.runs), when(t.last_event_at),
        runLink(t.latest_run_id), fact(t.latest_run_status)]);
      tr.dataset.thread = t.thread_id ?? "";
      tb.append(tr);
    }
    if (s.threads_truncated) tb.append(row(["…older threads are not listed"]));
    $("session-runs").tBodies[0].textContent = "";
    addRuns(s);
    $("session-id").textContent = V.session;
    document.title = "canopy: session " + V.session;
    return true;
  }

  function addRuns(s) {
    const tb = $("session-runs").tBodies[0];
    for (const r of s.runs) {
      const tr = row([runLink(r.run_id), r.thread_id ?? "(none)", fact(r.status), String(r.as_of_event_seq), when(r.as_of),
        fact(r.active_turn_id), r.pending_requests + (r.pending_approvals ? " (" + r.pending_approvals + " approvals)" : "")]);
      tr.dataset.run = r.run_id;
      tb.append(tr);
    }
    V.runsCursor = s.next_cursor;
    $("session-runs-more").hidden = !s.next_cursor;
  }

  async function moreRuns() {
    if (!V.runsCursor) return;
    const resp = await get(base() + "?history_limit=0&after=" + enc(V.runsCursor));
    if (!resp.ok) { setState("More runs unavailable: " + (await problemOf(resp)), "error"); return; }
    addRuns(await resp.json());
  }

  // ---- 2. the recent history, and older pages on demand ----
  async function loadHistory() {
    if (V.historyLoading) return;
    V.historyLoading = true;
    try {
      const resp = await get(base() + "/history?limit=20" + (V.historyCursor ? "&cursor=" + enc(V.historyCursor) : ""));
      if (!resp.ok) { $("session-history-end").textContent = "History unavailable: " + (await problemOf(resp)); return; }
      const pg = await resp.json();
      for (const e of pg.entries) {
        const li = el("li", when(e.at) + " · " + e.run_id + " #" + e.seq + " · " + e.type + " · " + e.agent_id + (e.status ? " → " + e.status : ""));
        li.dataset.run = e.run_id; li.dataset.seq = e.seq;
        $("session-history").append(li);
      }
      V.historyCursor = pg.next_cursor;
      $("session-history-more").hidden = !pg.next_cursor;
      if (!pg.next_cursor) $("session-history-end").textContent = pg.truncated ? "Older events are no longer kept." : "The session's first events.";
      if (!pg.complete) $("session-history-end").textContent += " Partitions " + pg.unavailable_partitions.join(", ") + " did not answer.";
    } finally { V.historyLoading = false; }
  }

  // ---- 3. the active thread's read model; 4. its queue and requests ----
  function activeRun() {
    const s = V.snap;
    const t = s.threads.find((x) => x.active) || s.threads[0];
    return t ? t.latest_run_id : (s.runs[0] || {}).run_id || "";
  }

  async function loadActive() {
    V.activeRun = activeRun();
    const box = $("session-active"); box.textContent = "";
    if (!V.activeRun) { box.append(el("p", "No run to show.", "muted")); return; }
    const resp = await get("/v1/runs/" + enc(V.activeRun) + "/read-model");
    if (!resp.ok) { box.append(el("p", "The read model of " + V.activeRun + " is unavailable: " + (await problemOf(resp)), "warn")); return; }
    const m = V.readModel = await resp.json();
    const p = el("p"); p.append("Run ", runLink(m.run_id), " on thread " + (m.thread_id ?? "(none)") + (m.stale ? " (stale)" : "")); box.append(p);
    const d = el("dl"); box.append(d);
    const c = m.counts.by_status;
    dl(d, [
      ["Status", fact(m.status)],
      ["Active turn", fact(m.active_turn_id)],
      ["Last outcome", fact(m.last_outcome, (o) => o.outcome + " (" + o.turn_id + ")")],
      ["Nodes", m.counts.nodes + ": " + c.running + " running, " + c.blocked + " blocked, " + c.failed + " failed, " + c.completed + " completed"],
    ]);
  }

  function renderRequests() {
    const box = $("session-requests"); box.textContent = "";
    const m = V.readModel;
    if (!m) { box.append(el("p", "Unknown: the active run's read model is unavailable.", "unknown")); return; }
    const d = el("dl"); box.append(d);
    const q = m.queued_turns || {};
    dl(d, [
      ["Queued turns", fact(q, (l) => l.total + (l.turns.length ? ": " + l.turns.map((t) => t.turn_id).join(", ") : ""))],
      ["Pending requests", m.pending_requests.total + (m.pending_requests.requests.length ? ": " + m.pending_requests.requests.map((r) => r.request_id + " (" + r.agent_id + ")").join(", ") : "")],
      ["Pending approvals", fact(m.pending_approvals, (l) => l.total + (l.requests.length ? ": " + l.requests.map((r) => r.request_id).join(", ") : ""))],
    ]);
  }

  // ---- 5. on demand: tools, artifacts, evidence, task graphs, subagents ----
  function showDetails() {
    const box = $("session-details"); box.hidden = false; box.textContent = "";
    const s = V.snap; const m = V.readModel;
    const list = (title, items, text) => {
      box.append(el("h4", title));
      if (!items.length) { box.append(el("p", "none", "muted")); return; }
      const ul = el("ul"); for (const x of items) ul.append(el("li", text(x))); box.append(ul);
    };
    box.append(el("h4", "Tools of " + (m ? m.run_id : "the active run")));
    box.append(el("p", m ? fact(m.tool_summary, (t) => t.started + " calls, " + t.running + " running, " + t.failed_tools + " failed") : "unknown", "tools"));
    list("Artifacts", s.artifacts, (a) => when(a.at) + " · " + a.run_id + " · " + a.artifact_id + " (" + a.artifact_type + ")");
    list("Evidence", s.evidence, (e) => when(e.at) + " · " + e.run_id + " · " + e.evidence_id + " (" + e.evidence_kind + (e.verdict ? ", " + e.verdict : "") + ")");
    if (s.refs_truncated) box.append(el("p", "Older runs were not read: newer refs may exist in them.", "warn"));
    list("Active task graphs", s.task_graphs, (g) => g.run_id + " · plan " + g.plan_id + " · " + g.completed + " of " + g.steps + " steps done, " + g.failed + " failed");
    list("Subagents", s.subagents, (a) => a.run_id + " · " + a.agent_id + " → " + (a.child_run_id ?? "(no child run named)") + " · " + a.watchdog_status);
    stage("details");
  }

  async function load() {
    setState("Loading session " + V.session + "…");
    if (!(await loadShell())) return;
    stage("shell");
    await loadHistory(); stage("history");
    await loadActive(); stage("active");
    renderRequests(); stage("requests");
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("session-pick").addEventListener("submit", (e) => {
      e.preventDefault();
      const id = $("session-input").value.trim();
      if (id) location.assign(location.pathname + "?session=" + enc(id));
    });
    if (!V.session) return;
    // app.js's handler ran first: it kept the token and left only #run= in
    // the address; put the session back.
    if (fragToken) sessionStorage.setItem("canopy.token", fragToken);
    V.token = sessionStorage.getItem("canopy.token") || "";
    history.replaceState(null, "", location.pathname + "?session=" + enc(V.session));
    $("session-input").value = V.session;
    document.querySelector("main").hidden = true;
    $("session-view").hidden = false;
    $("session-id").textContent = V.session;
    $("session-runs-more").addEventListener("click", moreRuns);
    $("session-history-more").addEventListener("click", loadHistory);
    $("session-more").addEventListener("click", showDetails);
    // Opening a run from the header leaves the session for the run page
    // (app.js opens it).
    const toRun = () => { $("session-view").hidden = true; document.querySelector("main").hidden = false; };
    $("pick").addEventListener("submit", toRun);
    $("runs").addEventListener("change", toRun);
    if (!V.token) { setState("Give a bearer token (the token field, then open the session again).", "error"); return; }
    load().catch((e) => setState("The gateway cannot be reached: " + e.message, "error"));
  });
})();
