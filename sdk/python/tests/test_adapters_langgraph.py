"""canopy.adapters.langgraph on LangGraph graphs (no model, no network): what the callback
handler makes of node agents, interrupts in a node, resumes and errors.
examples/python/langgraph_demo.py, run by sdk/adapters_test.go against a projector, is the
three-level program with an approval in a tool."""
from __future__ import annotations

from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph", reason="the langgraph extra is not installed")

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

import canopy  # noqa: E402
from canopy.adapters.langgraph import CanopyCallbackHandler  # noqa: E402


class State(TypedDict, total=False):
    topic: str
    draft: str
    verdict: str


def of(events: list[canopy.Event], type: str, agent: str | None = None) -> list[dict[str, Any]]:
    return [dict(e.data or {}) for e in events if e.type == type and (agent is None or e.agent_id == agent)]


def statuses(events: list[canopy.Event], agent: str) -> list[str]:
    return [d["status"] for d in of(events, "tree.node_status", agent)]


def valid(events: list[canopy.Event]) -> None:
    for e in events:
        canopy.validate(e.with_source("/test"))


def review_graph() -> Any:
    """writer (a subgraph with a researcher node) -> reviewer, a node that asks a person."""
    inner = StateGraph(State)
    inner.add_node("researcher", lambda s: {"draft": "notes on " + s["topic"]})
    inner.add_edge(START, "researcher")
    writer = inner.compile(name="writer")

    def reviewer(s: State) -> State:
        answer = interrupt({"question": "publish?", "draft": s["draft"]})
        return {"verdict": str(answer)}

    g = StateGraph(State)
    g.add_node("writer", writer)
    g.add_node("reviewer", reviewer)
    g.add_edge(START, "writer")
    g.add_edge("writer", "reviewer")
    g.add_edge("reviewer", END)
    return g.compile(name="desk", checkpointer=InMemorySaver())


def test_interrupt_in_a_node_and_resume() -> None:
    """agent_nodes makes plain nodes agents (under the graph they run in); an interrupt in a node
    is a request (kind input: its value names none) of that node's agent, which blocks with the
    root; the resume resolves it, and the run completes, under the thread's id."""
    sent: list[canopy.Event] = []
    handler = CanopyCallbackHandler(sent.append, agent_nodes=["researcher", "reviewer"])
    app = review_graph().with_config(callbacks=[handler])
    config: Any = {"configurable": {"thread_id": "thread-7"}}
    out = app.invoke({"topic": "tides"}, config)
    assert out.get("__interrupt__")
    parents = {e.agent_id: (e.data or {}).get("parent_agent_id") for e in sent if e.type == "tree.node_created"}
    assert parents == {"desk": None, "writer": "desk", "researcher": "writer", "reviewer": "desk"}
    requests = of(sent, "signal.request", "reviewer")
    assert len(requests) == 1 and requests[0]["request_kind"] == "input"
    assert statuses(sent, "reviewer")[-1] == "blocked" and statuses(sent, "desk")[-1] == "blocked"
    assert of(sent, "tree.node_status", "desk")[-1]["reason"] == "waiting_for_input"
    assert of(sent, "turn.completed", "desk")[-1]["outcome"] == "interrupted"
    assert of(sent, "tree.node_completed", "writer") == of(sent, "tree.node_completed", "researcher") == [
        {"result_source": "completion_event"}]

    out = app.invoke(Command(resume="yes"), config)
    assert out["verdict"] == "yes"
    assert of(sent, "signal.request_resolved") == [{"request_id": requests[0]["request_id"], "resolution": "answered"}]
    assert statuses(sent, "desk")[-1] == "completed"
    assert {e.run_id for e in sent} == {"thread-7"}
    handler.flush()
    valid(sent)


def test_a_failing_node() -> None:
    """An error in a subgraph fails its agent (signal.failed) and the run's root."""
    def boom(s: State) -> State:
        raise ValueError("no data")

    inner = StateGraph(State)
    inner.add_node("fetch", boom)
    inner.add_edge(START, "fetch")
    g = StateGraph(State)
    g.add_node("fetcher", inner.compile())  # a graph without a name: its node's
    g.add_edge(START, "fetcher")
    sent: list[canopy.Event] = []
    app = g.compile(name="pipeline")
    with pytest.raises(ValueError):
        app.invoke({"topic": "x"}, {"callbacks": [CanopyCallbackHandler(sent.append, run_id="run-fail")]})
    assert of(sent, "tree.node_created", "fetcher") == [{"role": "worker", "parent_agent_id": "pipeline"}]
    assert of(sent, "signal.failed", "fetcher") == [{"error_code": "valueerror"}]
    assert of(sent, "tree.node_status", "pipeline")[-1] == {"status": "failed", "reason": "valueerror"}
    assert of(sent, "turn.completed", "pipeline")[-1]["outcome"] == "failed"
    assert {e.run_id for e in sent} == {"run-fail"}
    valid(sent)
