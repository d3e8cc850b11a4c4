"""canopy for the OpenAI Agents SDK (openai-agents on PyPI): a tracing processor.

    from canopy.adapters import openai_agents as canopy_agents
    tracer = canopy_agents.install(producer)          # every run of the program feeds canopy

The SDK reports each run as a trace of spans; the processor turns them into canopy events as
they start and end (docs/adapters/openai-agents.md has the table and what is lost):

    trace                       a run: its id the trace id, the trace metadata's canopy_run_id,
                                or install(run_id=...); its group_id the session
    agent span                  a node: the first agent of the run is the root (role conductor),
                                an agent reached by a handoff is a child of the agent that
                                handed off, an agent used as a tool (Agent.as_tool) a child of
                                the agent that called it (tree.node_created, tree.node_delegated);
                                tree.node_status running, tree.node_completed when it ends
    turn span                   turn.started, turn.completed (failed on an error)
    function span               tool.started, tool.finished (failed on an error; call_kind mcp
                                for an MCP tool); a call that ended without output when the
                                run stopped waits (for its approval) until the run resumes it
    generation, response span   model.usage
    guardrail span (tripped)    incident.opened, the node failed
    handoff span                the parent edge and delegation of the agent handed to
    error on an agent span      signal.failed on its agent; the run's root failed at its end
    end of Runner.run           the root completed (or failed)

A tool that needs approval (function_tool(needs_approval=...)) stops the run with
interruptions, which no span shows: report them with tracer.interruptions(result) (a
signal.request of kind approval per pending call, its agent blocked), and decide with
tracer.approve(state, item) or tracer.reject(state, item) in place of state.approve/reject
(signal.request_resolved answered or rejected). A run resumed from the state is the same trace,
so the same canopy run.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

try:
    from agents.tracing import (
        TracingProcessor,
        add_trace_processor,
        get_current_trace,
        set_trace_processors,
    )
except ImportError as e:  # pragma: no cover - the extra is not installed
    raise ImportError("canopy.adapters.openai_agents needs the OpenAI Agents SDK: "
                      "pip install 'canopy-agents[openai-agents]'") from e

from .. import events
from .._event import Event
from ._common import Emitter, Target, code, count, event_id, ident, now, parse_time, text

__all__ = ["CanopyTracingProcessor", "install"]

MAX_RUNS = 1024
"""How many runs a processor remembers (for a run resumed after an interruption); the least
recently active is forgotten first."""

RUN_ID_METADATA = "canopy_run_id"
"""The trace metadata key that names the canopy run (trace(..., metadata={...}) or
RunConfig(trace_metadata={...})), when install() was given no run_id."""


@dataclass
class _Span:
    """What the processor keeps of an open span: enough to find, for a span that starts under
    it, its agent, the tool call that runs it and its turn."""

    parent: str | None
    agent: str | None
    call: str | None = None
    turn: str | None = None
    # a function span's canopy call, and when it started (a resumed call's first start)
    tool_call: _Call | None = None


@dataclass
class _Call:
    """A tool call whose span ended without output: a call that waits for a person's approval
    (or, when the run goes on, one that returned None)."""

    call_id: str
    agent: str
    tool: str
    started: datetime | None
    ended: datetime | None = None


@dataclass
class _Run:
    """A canopy run: one trace of the SDK, across the Runner.run calls that resume it."""

    run_id: str
    session_id: str | None
    root: str | None = None
    nodes: set[str] = field(default_factory=set)
    # agent name handed to -> (the node that handed off, the handoff span)
    handoffs: dict[str, tuple[str, str]] = field(default_factory=dict)
    # request id -> (its node, its tool)
    approvals: dict[str, tuple[str, str]] = field(default_factory=dict)
    # calls that ended without output in this Runner.run, and those that did when a former one
    # stopped: waiting for approval until the run resumes them
    deferred: list[_Call] = field(default_factory=list)
    parked: list[_Call] = field(default_factory=list)
    # agents whose span ended with such a call: done only if the run goes on (-> when it ended)
    waiting: dict[str, datetime] = field(default_factory=dict)
    active: bool = False
    failed: str | None = None


class CanopyTracingProcessor(TracingProcessor):
    """A TracingProcessor that sends each run's agents, tools, model calls, guardrails and
    approvals to canopy (the module's doc has the mapping). Thread-safe; it never raises into
    the SDK: an event canopy refused is logged, and flush() raises it."""

    def __init__(self, target: Target, *, run_id: str | None = None, session_id: str | None = None,
                 thread_id: str | None = None, source: str | None = None) -> None:
        """target is a canopy.Producer or a callable taking each canopy.Event. run_id, when
        given, is the canopy run of every trace (a program that runs one workflow); otherwise
        each trace is its own run. session_id and thread_id scope the events (session_id
        defaults to the trace's group_id); source defaults to the producer's."""
        self._emit = Emitter(target)
        self._run_id = ident(run_id, "run") if run_id is not None else None
        self._session_id = ident(session_id, "session") if session_id is not None else None
        self._thread_id = ident(thread_id, "thread") if thread_id is not None else None
        self._source = source
        self._lock = threading.RLock()
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._spans: dict[str, _Span] = {}
        self._last_trace: str | None = None

    # ---- the TracingProcessor interface ----

    def on_trace_start(self, trace: Any) -> None:
        with self._lock:
            self._run(trace.trace_id, trace)

    def on_trace_end(self, trace: Any) -> None:
        with self._lock:
            run = self._runs.get(trace.trace_id)
            if run is not None:
                self._end(run, now())

    def on_span_start(self, span: Any) -> None:
        with self._lock:
            run = self._run(span.trace_id)
            at = parse_time(span.started_at) or now()
            if not run.active:
                run.active = True
                run.waiting.clear()
                if run.root is not None:
                    self._send(run, events.tree_node_status, run.root, at, status="running", reason="resumed")
            elif run.deferred:
                # The run went on: those calls returned None, they waited for nobody.
                for call in run.deferred:
                    self._finish(run, call, "succeeded")
                run.deferred.clear()
                for agent, ended in run.waiting.items():
                    if agent != run.root:
                        self._send(run, events.tree_node_completed, agent, ended, result_source="completion_event")
                run.waiting.clear()
            parent = self._spans.get(span.parent_id) if span.parent_id else None
            rec = _Span(span.parent_id, parent.agent if parent else None,
                        parent.call if parent else None, parent.turn if parent else None)
            kind = span.span_data.type
            if kind == "agent":
                rec.agent = self._agent_started(run, span, parent, at)
                rec.call = rec.turn = None
            elif kind == "function":
                rec.tool_call = self._tool_started(run, span, rec, at)
                rec.call = rec.tool_call.call_id
            elif kind == "turn":
                rec.turn = span.span_id
                self._send(run, events.turn_started, self._agent(run, rec), at, turn_id=ident(span.span_id, "turn"))
            self._spans[span.span_id] = rec

    def on_span_end(self, span: Any) -> None:
        with self._lock:
            rec = self._spans.pop(span.span_id, None)
            run = self._run(span.trace_id)
            at = parse_time(span.ended_at) or now()
            if rec is None:
                rec = _Span(span.parent_id, None)
            data = span.span_data
            kind = data.type
            err = span.error
            agent = self._agent(run, rec)
            if kind == "agent":
                if err:
                    self._failed(run, agent, at, _error_code(err, "agent_error"))
                elif any(call.agent == agent for call in run.deferred):
                    run.waiting[agent] = at
                elif agent != run.root:
                    self._send(run, events.tree_node_completed, agent, at, result_source="completion_event")
            elif kind == "function":
                call = rec.tool_call or _Call(ident(span.span_id, "call"), agent, ident(data.name, "tool"),
                                              parse_time(span.started_at))
                call.ended = at
                if err:
                    self._finish(run, call, "failed", _error_code(err, "tool_error"))
                elif getattr(data, "output", None) is None:
                    run.deferred.append(call)
                else:
                    self._finish(run, call, "succeeded")
            elif kind == "turn":
                self._send(run, events.turn_completed, agent, at, turn_id=ident(span.span_id, "turn"),
                           outcome="failed" if err else "succeeded",
                           error_code=_error_code(err, "turn_error") if err else None)
            elif kind in ("generation", "response"):
                self._usage(run, span, agent, at)
            elif kind == "handoff":
                if data.to_agent:
                    run.handoffs[ident(data.to_agent, "agent")] = (agent, span.span_id)
            elif kind == "guardrail":
                if data.triggered:
                    name = ident(data.name, "guardrail")
                    self._send(run, events.incident_opened, agent, at, incident_id=ident(span.span_id, "incident"),
                               incident_kind="guardrail", severity="error", title=text(f"guardrail {name} tripped"))
                    run.failed = "guardrail_tripwire"
                    self._send(run, events.tree_node_status, agent, at, status="failed", reason="guardrail_tripwire")
            elif kind == "task" and span.parent_id is None:
                if err:
                    run.failed = run.failed or _error_code(err, "run_error")
                self._end(run, at)

    def shutdown(self) -> None:
        self.force_flush()

    def force_flush(self) -> None:
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - the SDK's own flush must not fail for canopy; flush() raises
            pass

    # ---- human in the loop ----

    def interruptions(self, result: Any) -> int:
        """Report the approvals a run stopped for (result.interruptions of Runner.run's result):
        for each, a signal.request of kind approval from the agent that asked, its request id
        approval:<tool call id>; then the agents that asked, those whose calls wait for them
        and the run's root blocked (reason waiting_for_approval). Returns how many it
        reported."""
        items = list(getattr(result, "interruptions", None) or [])
        if not items:
            return 0
        with self._lock:
            run = self._run_of(result)
            if run is None:
                return 0
            at = now()
            blocked: dict[str, None] = {}
            for item in items:
                agent = ident(getattr(getattr(item, "agent", None), "name", None), run.root or "agent")
                tool = ident(getattr(item, "tool_name", None) or getattr(item, "name", None), "tool")
                request_id = _request_id(item)
                run.approvals[request_id] = (agent, tool)
                self._send(run, events.signal_request, agent, at, request_id=request_id, request_kind="approval",
                           dedupe_key=request_id)
                blocked.setdefault(agent, None)
            # The agent that asked, those whose calls wait for it, and the root.
            blocked.update(dict.fromkeys(run.waiting))
            if run.root is not None:
                blocked.setdefault(run.root, None)
            for agent in blocked:
                self._send(run, events.tree_node_status, agent, at, status="blocked", reason="waiting_for_approval")
            return len(items)

    def approve(self, state: Any, item: Any, always_approve: bool = False) -> None:
        """state.approve(item), and the item's request resolved (answered)."""
        state.approve(item, always_approve=always_approve)
        self._resolve(state, item, "answered")

    def reject(self, state: Any, item: Any, always_reject: bool = False, *, rejection_message: str | None = None) -> None:
        """state.reject(item), and the item's request resolved (rejected)."""
        state.reject(item, always_reject=always_reject, rejection_message=rejection_message)
        self._resolve(state, item, "rejected")

    def flush(self, timeout: float = 30.0) -> None:
        """Flush the producer; raise canopy.DeliveryError for what Kafka refused, or
        AdapterError for events refused before (an invalid event: a bug to report)."""
        self._emit.flush(timeout)

    # ---- the mapping ----

    def _run(self, trace_id: str, trace: Any = None) -> _Run:
        self._last_trace = trace_id
        run = self._runs.get(trace_id)
        if run is not None:
            self._runs.move_to_end(trace_id)
            return run
        exported: dict[str, Any] = {}
        if trace is None:
            current = get_current_trace()
            if current is not None and current.trace_id == trace_id:
                trace = current
        if trace is not None:
            exported = trace.export() or {}
        metadata = exported.get("metadata") or {}
        run_id = self._run_id or ident(metadata.get(RUN_ID_METADATA) or trace_id, "run")
        group = exported.get("group_id")
        session = self._session_id or (ident(group, "session") if group else None)
        run = _Run(run_id, session)
        self._runs[trace_id] = run
        while len(self._runs) > MAX_RUNS:
            self._runs.popitem(last=False)
        return run

    def _run_of(self, result_or_state: Any) -> _Run | None:
        """The run of a RunResult or a RunState, by its trace; else the latest run."""
        trace = getattr(result_or_state, "trace", None)
        trace_id = getattr(trace, "trace_id", None)
        if trace_id is None:
            state = getattr(result_or_state, "_trace_state", None)
            trace_id = getattr(state, "trace_id", None)
        if trace_id is None:
            trace_id = self._last_trace
        return self._run(trace_id) if trace_id is not None else None

    def _agent(self, run: _Run, rec: _Span) -> str:
        return rec.agent or run.root or "workflow"

    def _agent_started(self, run: _Run, span: Any, parent: _Span | None, at: datetime) -> str:
        node = ident(span.span_data.name, "agent")
        handoff = run.handoffs.pop(node, None)
        by: str | None
        via: str | None
        if handoff is not None:
            by, via = handoff
        elif parent is not None and parent.agent is not None:
            by, via = parent.agent, parent.call
        else:
            by, via = run.root, None
        if node not in run.nodes:
            run.nodes.add(node)
            if run.root is None:
                run.root, by = node, None
            self._send(run, events.tree_node_created, node, at, role="conductor" if by is None else "worker",
                       parent_agent_id=by if by != node else None)
        if node != run.root and via is not None:
            self._send(run, events.tree_node_delegated, node, at, task_id=ident(via, "task"))
        self._send(run, events.tree_node_status, node, at, status="running")
        return node

    def _tool_started(self, run: _Run, span: Any, rec: _Span, at: datetime) -> _Call:
        agent = self._agent(run, rec)
        tool = ident(span.span_data.name, "tool")
        for request_id, (asked_by, asked_for) in list(run.approvals.items()):
            # The run resumed and runs the call that waited: a person decided.
            if asked_by == agent and asked_for == tool:
                del run.approvals[request_id]
                self._send(run, events.signal_request_resolved, agent, at, request_id=request_id, resolution="answered")
        for i, call in enumerate(run.parked):
            if call.agent == agent and call.tool == tool:
                # The call that waited runs now: the same call, resumed.
                return run.parked.pop(i)
        call = _Call(ident(span.span_id, "call"), agent, tool, parse_time(span.started_at))
        self._send(run, events.tool_started, agent, at, call_id=call.call_id, tool_name=tool,
                   call_kind="mcp" if getattr(span.span_data, "mcp_data", None) else "tool",
                   turn_id=ident(rec.turn, "turn") if rec.turn else None)
        return call

    def _finish(self, run: _Run, call: _Call, outcome: str, error_code: str | None = None) -> None:
        at = call.ended or now()
        ms = int((at - call.started).total_seconds() * 1000) if call.started else None
        self._send(run, events.tool_finished, call.agent, at, call_id=call.call_id, outcome=outcome,
                   duration_ms=count(ms), error_code=error_code)

    def _usage(self, run: _Run, span: Any, agent: str, at: datetime) -> None:
        data = span.span_data
        usage = data.usage if isinstance(getattr(data, "usage", None), dict) else {}
        model = getattr(data, "model", None)
        response = getattr(data, "response", None)
        if model is None and response is not None:
            model = getattr(response, "model", None)
            if not usage and getattr(response, "usage", None) is not None:
                usage = response.usage.model_dump()
        details = usage.get("input_tokens_details") or {}
        self._send(run, events.model_usage, agent, at, id=event_id(at, run.run_id, span.span_id, "model.usage"),
                   model=ident(model, "unknown"),
                   input_tokens=count(usage.get("input_tokens", usage.get("prompt_tokens"))),
                   output_tokens=count(usage.get("output_tokens", usage.get("completion_tokens"))),
                   cached_tokens=count(details.get("cached_tokens")) or None)

    def _failed(self, run: _Run, agent: str, at: datetime, error_code: str) -> None:
        run.failed = run.failed or error_code
        self._send(run, events.signal_failed, agent, at, error_code=error_code)

    def _end(self, run: _Run, at: datetime) -> None:
        """A Runner.run ended: its root completed, or failed; or, when calls ended without
        output in it, they wait (for approval: interruptions() says so) until the run resumes,
        and so does the root. Calls that waited since an earlier Runner.run and did not run in
        this one were not approved."""
        if not run.active:
            return
        run.active = False
        run.handoffs.clear()
        for call in run.parked:
            for request_id, (asked_by, asked_for) in list(run.approvals.items()):
                if (asked_by, asked_for) == (call.agent, call.tool):
                    del run.approvals[request_id]
                    self._send(run, events.signal_request_resolved, call.agent, at, request_id=request_id,
                               resolution="rejected")
            call.ended = at
            self._finish(run, call, "cancelled", "not_approved")
        run.parked, run.deferred = run.deferred, []
        if run.root is not None and not run.parked:
            if run.failed:
                self._send(run, events.tree_node_status, run.root, at, status="failed", reason=run.failed)
            else:
                self._send(run, events.tree_node_status, run.root, at, status="completed")
        run.failed = None

    def _resolve(self, state: Any, item: Any, resolution: str) -> None:
        with self._lock:
            run = self._run_of(state)
            if run is None:
                return
            request_id = _request_id(item)
            agent, _ = run.approvals.pop(request_id, (None, None))
            agent = agent or ident(getattr(getattr(item, "agent", None), "name", None), run.root or "agent")
            self._send(run, events.signal_request_resolved, agent, now(), request_id=request_id, resolution=resolution)

    def _send(self, run: _Run, builder: Callable[..., Event], agent: str, at: datetime, **data: Any) -> None:
        try:
            ev = builder(run_id=run.run_id, agent_id=agent, time=at, session_id=run.session_id,
                         thread_id=self._thread_id, source=self._source, **data)
        except Exception as e:  # noqa: BLE001 - a builder's refusal is the adapter's bug: reported by flush
            self._emit.refused(e)
            return
        self._emit(ev)


def _request_id(item: Any) -> str:
    raw = getattr(item, "raw_item", None)
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return ident("approval:" + str(call_id or getattr(raw, "id", None) or id(item)), "approval")


def _error_code(err: Any, fallback: str) -> str:
    message = err.get("message") if isinstance(err, dict) else getattr(err, "message", None)
    return code(message, fallback)


def install(target: Target, *, run_id: str | None = None, session_id: str | None = None,
            thread_id: str | None = None, source: str | None = None, exclusive: bool = False) -> CanopyTracingProcessor:
    """Add a CanopyTracingProcessor to the SDK's trace processors and return it. exclusive
    replaces them instead (set_trace_processors): the SDK's default processor exports traces to
    OpenAI, which an offline program or a test does not want."""
    processor = CanopyTracingProcessor(target, run_id=run_id, session_id=session_id, thread_id=thread_id,
                                       source=source)
    if exclusive:
        set_trace_processors([processor])
    else:
        add_trace_processor(processor)
    return processor
