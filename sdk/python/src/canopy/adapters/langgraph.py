"""canopy for LangGraph (langgraph on PyPI): a LangChain callback handler.

    from canopy.adapters.langgraph import CanopyCallbackHandler
    app = graph.compile(checkpointer=...).with_config(callbacks=[CanopyCallbackHandler(producer)])

LangGraph reports a graph's run through LangChain's callbacks: a chain for the graph, one for
each node it runs (a step), and the chat model and tool calls inside them. The handler turns
them into canopy events (docs/adapters/langgraph.md has the table and what is lost):

    the graph's run             a run: its id the handler's run_id, else the thread_id of the
                                config (so that a run resumed after an interrupt is the same
                                run), else LangChain's run id; the graph the root node (role
                                conductor, named after the graph), turn.started/turn.completed
                                per invocation
    subgraph                    a node, child of the graph (or subgraph) it runs in: a graph
                                added as a node, or invoked from a node or a tool (an agent
                                used as a tool); named after the graph (or its node, when the
                                graph has no name of its own); tree.node_created,
                                tree.node_delegated, running, tree.node_completed when it ends.
                                agent_nodes names plain nodes to count as agents too
    tool call                   tool.started, tool.finished (call id the model's tool_call_id)
    chat model call             model.usage (model name, provider, tokens)
    interrupt()                 signal.request (request id the interrupt's id, kind the value's
                                "kind" when it is a dict that has one, else input); the agent
                                that asked, the agents waiting for it and the root blocked;
                                the interrupted tool call stays running until it runs again
    Command(resume=...)         signal.request_resolved (answered) of the interrupts it resumes
    an error                    signal.failed on the agent it came from; the root failed
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langgraph.errors import GraphInterrupt
    from langgraph.types import Command
except ImportError as e:  # pragma: no cover - the extra is not installed
    raise ImportError("canopy.adapters.langgraph needs LangGraph: pip install 'canopy-agents[langgraph]'") from e

from .. import events
from .._event import Event
from ._common import Emitter, Target, code, count, event_id, ident, now

__all__ = ["CanopyCallbackHandler"]

MAX_RUNS = 1024
"""How many runs a handler remembers (for a run resumed after an interrupt); the least recently
active is forgotten first."""

DEFAULT_GRAPH_NAME = "LangGraph"
"""The name LangGraph gives a compiled graph that was given none."""


@dataclass
class _Rec:
    """What the handler keeps of an open LangChain run (a chain, a model call, a tool call)."""

    run: _Run
    parent: UUID | None
    name: str
    agent: str | None
    step: str | None = None  # the graph node this chain runs, when it is a step of a graph
    call: str | None = None  # the tool call it runs under
    is_agent: bool = False
    model: str | None = None
    provider: str | None = None


@dataclass
class _Call:
    call_id: str
    agent: str
    started: datetime


@dataclass
class _Run:
    run_id: str
    session_id: str | None
    root: str | None = None
    nodes: dict[str, str | None] = field(default_factory=dict)  # node -> its parent
    interrupts: dict[str, tuple[str, str]] = field(default_factory=dict)  # open: id -> (agent, kind)
    waiting: dict[str, _Call] = field(default_factory=dict)  # interrupted tool calls, by call id
    failed: str | None = None
    # what the invocation under way did: agents it blocked, whether an interrupt stopped it
    blocked: set[str] = field(default_factory=set)
    interrupted: bool = False


class CanopyCallbackHandler(BaseCallbackHandler):
    """A LangChain callback handler that sends a LangGraph run's agents, tools, model calls and
    interrupts to canopy (the module's doc has the mapping). Pass it in the config's callbacks
    (graph.invoke(inputs, {"callbacks": [handler], ...}), or graph.with_config(callbacks=[...])).
    Thread-safe; it never raises into the graph: an event canopy refused is logged, and flush()
    raises it."""

    raise_error = False
    # Called in the graph's own thread, in order, also for async graphs.
    run_inline = True

    def __init__(self, target: Target, *, run_id: str | None = None, session_id: str | None = None,
                 thread_id: str | None = None, source: str | None = None, agent_nodes: Iterable[str] = ()) -> None:
        """target is a canopy.Producer or a callable taking each canopy.Event. run_id, when
        given, is the canopy run of every invocation; otherwise the config's thread_id is.
        session_id and thread_id scope the events; source defaults to the producer's.
        agent_nodes names graph nodes (plain functions, not subgraphs) to show as agents of
        their own."""
        self._emit = Emitter(target)
        self._run_id = ident(run_id, "run") if run_id is not None else None
        self._session_id = ident(session_id, "session") if session_id is not None else None
        self._thread_id = ident(thread_id, "thread") if thread_id is not None else None
        self._source = source
        self._agent_nodes = frozenset(agent_nodes)
        self._lock = threading.RLock()
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._recs: dict[UUID, _Rec] = {}

    def flush(self, timeout: float = 30.0) -> None:
        """Flush the producer; raise canopy.DeliveryError for what Kafka refused, or
        AdapterError for events refused before (an invalid event: a bug to report)."""
        self._emit.flush(timeout)

    # ---- chains: the graph, its steps, subgraphs ----

    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *, run_id: UUID,
                       parent_run_id: UUID | None = None, tags: list[str] | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        with self._lock:
            at = now()
            name = kwargs.get("name") or (serialized or {}).get("name") or DEFAULT_GRAPH_NAME
            parent = self._recs.get(parent_run_id) if parent_run_id is not None else None
            metadata = metadata or {}
            if parent is None:
                self._invoked(run_id, name, inputs, metadata, at)
                return
            step = None
            if any(t.startswith("graph:step:") for t in tags or ()):
                step = metadata.get("langgraph_node") or name
                if not parent.is_agent:
                    # The chain this step runs in is a graph: a subgraph, an agent.
                    self._promote(parent, at)
            rec = _Rec(parent.run, parent_run_id, name, parent.agent, step=step, call=parent.call)
            self._recs[run_id] = rec
            if step is not None and step in self._agent_nodes:
                self._promote(rec, at)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            rec = self._recs.pop(run_id, None)
            if rec is None or not rec.is_agent:
                return
            at = now()
            run = rec.run
            if rec.parent is None:
                # The graph returns normally when an interrupt stops it: the interrupt went up
                # through the chains below (on_chain_error), or is in its output.
                interrupted = run.interrupted or isinstance(outputs, dict) and bool(outputs.get("__interrupt__"))
                self._finished(run, run_id, at, "interrupted" if interrupted else None)
            else:
                self._send(run, events.tree_node_completed, rec.agent, at, result_source="completion_event")

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            rec = self._recs.pop(run_id, None)
            if rec is None:
                return
            at = now()
            run = rec.run
            if isinstance(error, GraphInterrupt):
                self._interrupted(rec, error, at)
                if rec.is_agent:
                    self._blocked(run, rec.agent, at)
                if rec.parent is None:
                    self._finished(run, run_id, at, "interrupted")
                return
            if rec.is_agent or rec.parent is None:
                error_code = code(type(error).__name__, "error")
                run.failed = run.failed or error_code
                self._send(run, events.signal_failed, rec.agent, at, error_code=error_code)
            if rec.parent is None:
                self._finished(run, run_id, at, "failed")

    # ---- tools ----

    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *, run_id: UUID,
                      parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        with self._lock:
            parent = self._recs.get(parent_run_id) if parent_run_id is not None else None
            if parent is None:
                return
            at = now()
            run = parent.run
            tool = ident(kwargs.get("name") or (serialized or {}).get("name"), "tool")
            call_id = ident(kwargs.get("tool_call_id") or run_id, "call")
            agent = self._agent(parent)
            self._recs[run_id] = _Rec(run, parent_run_id, tool, agent, call=call_id)
            if run.waiting.pop(call_id, None) is not None:
                return  # the call an interrupt stopped runs again: the same call
            self._send(run, events.tool_started, agent, at, call_id=call_id, tool_name=tool, call_kind="tool")

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            rec = self._recs.pop(run_id, None)
            if rec is None or rec.call is None:
                return
            failed = getattr(output, "status", None) == "error"
            self._send(rec.run, events.tool_finished, self._agent(rec), now(), call_id=rec.call,
                       outcome="failed" if failed else "succeeded", error_code="tool_error" if failed else None)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            rec = self._recs.pop(run_id, None)
            if rec is None or rec.call is None:
                return
            at = now()
            if isinstance(error, GraphInterrupt):
                # It runs again, from its start, when the graph resumes.
                self._interrupted(rec, error, at)
                rec.run.waiting[rec.call] = _Call(rec.call, self._agent(rec), at)
                return
            self._send(rec.run, events.tool_finished, self._agent(rec), at, call_id=rec.call, outcome="failed",
                       error_code=code(type(error).__name__, "tool_error"))

    # ---- model calls ----

    def on_chat_model_start(self, serialized: dict[str, Any] | None, messages: Any, *, run_id: UUID,
                            parent_run_id: UUID | None = None, metadata: dict[str, Any] | None = None,
                            **kwargs: Any) -> None:
        self._model_started(run_id, parent_run_id, metadata)

    def on_llm_start(self, serialized: dict[str, Any] | None, prompts: Any, *, run_id: UUID,
                     parent_run_id: UUID | None = None, metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._model_started(run_id, parent_run_id, metadata)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            rec = self._recs.pop(run_id, None)
            if rec is None:
                return
            at = now()
            message = _first_message(response)
            usage = dict(getattr(message, "usage_metadata", None) or {})
            meta = getattr(message, "response_metadata", None) or {}
            llm_output = getattr(response, "llm_output", None) or {}
            if not usage and isinstance(llm_output.get("token_usage"), dict):
                t = llm_output["token_usage"]
                usage = {"input_tokens": t.get("prompt_tokens"), "output_tokens": t.get("completion_tokens")}
            model = llm_output.get("model_name") or meta.get("model_name") or meta.get("model") or rec.model
            details = usage.get("input_token_details") or {}
            self._send(rec.run, events.model_usage, self._agent(rec), at,
                       id=event_id(at, rec.run.run_id, str(run_id), "model.usage"), model=ident(model, "unknown"),
                       provider=ident(rec.provider, "unknown") if rec.provider else None,
                       input_tokens=count(usage.get("input_tokens")), output_tokens=count(usage.get("output_tokens")),
                       cached_tokens=count(details.get("cache_read")) or None)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._recs.pop(run_id, None)

    # ---- the mapping ----

    def _invoked(self, run_id: UUID, name: str, inputs: Any, metadata: dict[str, Any], at: datetime) -> None:
        """A graph invoked with this handler: the run's root, and one turn of it."""
        key = self._run_id or ident(metadata.get("thread_id") or run_id, "run")
        run = self._runs.get(key)
        if run is None:
            run = _Run(key, self._session_id)
            self._runs[key] = run
            while len(self._runs) > MAX_RUNS:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(key)
        root = ident(name, DEFAULT_GRAPH_NAME)
        if run.root is None:
            run.root = root
            run.nodes[root] = None
            self._send(run, events.tree_node_created, root, at, role="conductor")
        rec = _Rec(run, None, name, run.root, is_agent=True)
        self._recs[run_id] = rec
        run.blocked.clear()
        run.interrupted = False
        if isinstance(inputs, Command) and inputs.resume is not None:
            resumed = inputs.resume
            ids = [i for i in resumed if isinstance(i, str)] if isinstance(resumed, dict) else list(run.interrupts)
            for interrupt_id in ids:
                request_id = ident(interrupt_id, "interrupt")
                if request_id in run.interrupts:
                    agent, _ = run.interrupts.pop(request_id)
                    self._send(run, events.signal_request_resolved, agent, at, request_id=request_id,
                               resolution="answered")
        self._send(run, events.tree_node_status, run.root, at, status="running")
        self._send(run, events.turn_started, run.root, at, turn_id=ident(run_id, "turn"))

    def _finished(self, run: _Run, run_id: UUID, at: datetime, outcome: str | None) -> None:
        """The graph's invocation ended: completed, failed, or interrupted (blocked until resumed).
        A call an interrupt stopped that this invocation did not run again was cancelled."""
        if outcome != "interrupted":
            for call in run.waiting.values():
                self._send(run, events.tool_finished, call.agent, at, call_id=call.call_id, outcome="cancelled",
                           error_code="not_resumed")
            run.waiting.clear()
        failed = outcome == "failed" or (outcome is None and run.failed is not None)
        turn = "failed" if failed else outcome or "succeeded"
        self._send(run, events.turn_completed, run.root, at, turn_id=ident(run_id, "turn"), outcome=turn,
                   error_code=run.failed if failed else None)
        if outcome == "interrupted":
            self._blocked(run, run.root, at)
        elif failed:
            self._send(run, events.tree_node_status, run.root, at, status="failed", reason=run.failed or "error")
        else:
            self._send(run, events.tree_node_status, run.root, at, status="completed")
        run.failed = None

    def _promote(self, rec: _Rec, at: datetime) -> None:
        """rec is an agent: a subgraph, or a node agent_nodes names. Its node is a child of the
        agent it runs under."""
        run = rec.run
        parent = self._recs.get(rec.parent) if rec.parent is not None else None
        name = rec.step if rec.step in self._agent_nodes else rec.name
        if name == DEFAULT_GRAPH_NAME and parent is not None and parent.step:
            name = parent.step  # a graph without a name of its own: its node's
        by = rec.agent or run.root
        node = ident(name, "agent")
        if node in run.nodes and run.nodes[node] != by and node != by:
            node = ident(f"{by}/{node}", "agent")  # another agent of that name, elsewhere in the tree
        rec.is_agent = True
        rec.agent = node
        if node not in run.nodes:
            run.nodes[node] = by
            self._send(run, events.tree_node_created, node, at, role="worker", parent_agent_id=by)
        # Delegated by the tool call it runs under (an agent used as a tool), else by its node.
        via = rec.call or (parent.step if parent is not None else None)
        rec.call = None
        self._send(run, events.tree_node_delegated, node, at, task_id=ident(via, "task") if via else None)
        self._send(run, events.tree_node_status, node, at, status="running")

    def _model_started(self, run_id: UUID, parent_run_id: UUID | None, metadata: dict[str, Any] | None) -> None:
        with self._lock:
            parent = self._recs.get(parent_run_id) if parent_run_id is not None else None
            if parent is None:
                return
            metadata = metadata or {}
            self._recs[run_id] = _Rec(parent.run, parent_run_id, "model", parent.agent, call=parent.call,
                                      model=metadata.get("ls_model_name"), provider=metadata.get("ls_provider"))

    def _interrupted(self, rec: _Rec, error: GraphInterrupt, at: datetime) -> None:
        """The interrupts error carries, each a request of the agent that raised it, the first
        time they are seen (the error goes up through every chain above it)."""
        run = rec.run
        for interrupt in _interrupts(error):
            request_id = ident(getattr(interrupt, "id", None), "interrupt")
            if request_id in run.interrupts:
                continue
            value = getattr(interrupt, "value", None)
            kind = value.get("kind") if isinstance(value, dict) and isinstance(value.get("kind"), str) else "input"
            agent = self._agent(rec)
            run.interrupts[request_id] = (agent, ident(kind, "input"))
            self._send(run, events.signal_request, agent, at, request_id=request_id, request_kind=ident(kind, "input"),
                       dedupe_key=request_id)
            run.interrupted = True
            self._blocked(run, agent, at)

    def _blocked(self, run: _Run, agent: str | None, at: datetime) -> None:
        """agent waits for a person (once per invocation: the interrupt goes up through its chains)."""
        if agent is not None and agent not in run.blocked:
            run.blocked.add(agent)
            self._send(run, events.tree_node_status, agent, at, status="blocked", reason=self._waiting(run))

    def _waiting(self, run: _Run) -> str:
        kinds = {kind for _, kind in run.interrupts.values()}
        return "waiting_for_approval" if kinds & {"approval", "permission"} else "waiting_for_input"

    def _agent(self, rec: _Rec) -> str:
        return rec.agent or rec.run.root or DEFAULT_GRAPH_NAME

    def _send(self, run: _Run, builder: Callable[..., Event], agent: str | None, at: datetime, **data: Any) -> None:
        try:
            ev = builder(run_id=run.run_id, agent_id=agent or run.root or DEFAULT_GRAPH_NAME, time=at,
                         session_id=run.session_id, thread_id=self._thread_id, source=self._source, **data)
        except Exception as e:  # noqa: BLE001 - a builder's refusal is the adapter's bug: reported by flush
            self._emit.refused(e)
            return
        self._emit(ev)


def _interrupts(error: GraphInterrupt) -> Sequence[Any]:
    args = error.args[0] if error.args else ()
    return args if isinstance(args, (list, tuple)) else ()


def _first_message(response: Any) -> Any:
    generations = getattr(response, "generations", None) or []
    if generations and generations[0]:
        return getattr(generations[0][0], "message", None)
    return None
