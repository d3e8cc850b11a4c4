"""canopy.adapters.openai_agents on programs of the OpenAI Agents SDK with scripted models (no
network): what the tracing processor makes of rejections, guardrails, failing tools and tools
that return nothing. examples/python/openai_agents_demo.py, run by sdk/adapters_test.go against a
projector, is the three-level program with an approval."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from agents import (  # noqa: E402
    Agent,
    GuardrailFunctionOutput,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    Runner,
    function_tool,
    output_guardrail,
)
from agents.testing.model import ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402
from agents.tracing import set_trace_processors  # noqa: E402

import canopy  # noqa: E402
from canopy.adapters import openai_agents  # noqa: E402


@pytest.fixture
def sent() -> Iterator[list[canopy.Event]]:
    events: list[canopy.Event] = []
    yield events
    set_trace_processors([])


def run(agent: Agent, input: Any) -> Any:
    return asyncio.run(Runner.run(agent, input, run_config=RunConfig(workflow_name="test")))


def of(events: list[canopy.Event], type: str, agent: str | None = None) -> list[dict[str, Any]]:
    """The data of the events of a type (and agent)."""
    return [dict(e.data or {}) for e in events if e.type == type and (agent is None or e.agent_id == agent)]


def statuses(events: list[canopy.Event], agent: str) -> list[str]:
    return [d["status"] for d in of(events, "tree.node_status", agent)]


def valid(events: list[canopy.Event]) -> None:
    for e in events:
        canopy.validate(e.with_source("/test"))


@function_tool(needs_approval=True)
def delete_account(user: str) -> str:
    """Delete an account (a person approves first)."""
    return f"deleted {user}"


def test_rejected_approval(sent: list[canopy.Event]) -> None:
    """A rejected call never runs: its request is resolved rejected, the call that waited for it
    is cancelled, and the run completes."""
    tracer = openai_agents.install(sent.append, run_id="run-reject", exclusive=True)
    agent = Agent(name="admin", tools=[delete_account], model=ScriptedModel([
        ModelStep(output=[function_call("delete_account", {"user": "bob"}, call_id="call-del")]),
        ModelStep(output=[assistant_message("not deleted")]),
    ]))
    result = run(agent, "delete bob")
    assert tracer.interruptions(result) == 1
    assert of(sent, "signal.request", "admin") == [
        {"request_id": "approval:call-del", "request_kind": "approval", "dedupe_key": "approval:call-del"}]
    started = of(sent, "tool.started", "admin")
    assert [s["tool_name"] for s in started] == ["delete_account"]
    assert of(sent, "tool.finished") == [], "the call waits for its approval: it has not finished"
    assert statuses(sent, "admin")[-1] == "blocked"

    state = result.to_state()
    tracer.reject(state, result.interruptions[0])
    result = run(agent, state)
    assert result.final_output == "not deleted"
    assert of(sent, "signal.request_resolved") == [{"request_id": "approval:call-del", "resolution": "rejected"}]
    assert of(sent, "tool.finished") == [{"call_id": started[0]["call_id"], "outcome": "cancelled",
                                           "error_code": "not_approved", "duration_ms": of(sent, "tool.finished")[0]["duration_ms"]}]
    assert statuses(sent, "admin")[-1] == "completed"
    assert all(e.run_id == "run-reject" for e in sent)
    tracer.flush()
    valid(sent)


def test_approved_without_the_helper(sent: list[canopy.Event]) -> None:
    """state.approve called directly: the call that waited runs when the run resumes, which
    resolves its request (answered), and finishes as the same call."""
    tracer = openai_agents.install(sent.append, exclusive=True)
    agent = Agent(name="admin", tools=[delete_account], model=ScriptedModel([
        ModelStep(output=[function_call("delete_account", {"user": "bob"}, call_id="call-del")]),
        ModelStep(output=[assistant_message("deleted")]),
    ]))
    result = run(agent, "delete bob")
    tracer.interruptions(result)
    state = result.to_state()
    state.approve(result.interruptions[0])
    run(agent, state)
    assert of(sent, "signal.request_resolved") == [{"request_id": "approval:call-del", "resolution": "answered"}]
    started, finished = of(sent, "tool.started"), of(sent, "tool.finished")
    assert len(started) == 1 and len(finished) == 1
    assert finished[0]["call_id"] == started[0]["call_id"] and finished[0]["outcome"] == "succeeded"
    assert len({e.run_id for e in sent}) == 1, "the resumed run is the same trace, so the same canopy run"
    assert sent[0].run_id.startswith("trace_")
    valid(sent)


@function_tool
def note(text: str) -> None:
    """Write a note; returns nothing."""


@function_tool
def broken(x: int) -> str:
    """Always fails."""
    raise RuntimeError("disk full")


def test_tools_that_return_nothing_or_fail(sent: list[canopy.Event]) -> None:
    """A tool that returned None finished (the run went on: it waited for nobody); a tool that
    raised failed."""
    openai_agents.install(sent.append, run_id="run-tools", exclusive=True)
    agent = Agent(name="writer", tools=[note, broken], model=ScriptedModel([
        ModelStep(output=[function_call("note", {"text": "hi"}, call_id="c1")]),
        ModelStep(output=[function_call("broken", {"x": 1}, call_id="c2")]),
        ModelStep(output=[assistant_message("done")]),
    ]))
    run(agent, "go")
    finished = {f["call_id"]: f for f in of(sent, "tool.finished")}
    names = {s["call_id"]: s["tool_name"] for s in of(sent, "tool.started")}
    outcomes = {names[c]: (f["outcome"], f.get("error_code")) for c, f in finished.items()}
    assert outcomes == {"note": ("succeeded", None), "broken": ("failed", "error_running_tool_non_fatal")}
    assert statuses(sent, "writer")[-1] == "completed"
    valid(sent)


@output_guardrail
def no_secrets(ctx: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered="password" in str(output))


def test_guardrail_tripwire(sent: list[canopy.Event]) -> None:
    """A tripped guardrail opens an incident on its agent, fails it, and the run fails."""
    openai_agents.install(sent.append, run_id="run-guard", exclusive=True)
    specialist = Agent(name="specialist", output_guardrails=[no_secrets], model=ScriptedModel([
        ModelStep(output=[assistant_message("your password is hunter2")]),
    ]))
    triage = Agent(name="triage", handoffs=[specialist], model=ScriptedModel([
        ModelStep(output=[function_call("transfer_to_specialist", {}, call_id="h1")]),
    ]))
    with pytest.raises(OutputGuardrailTripwireTriggered):
        run(triage, "what is my password?")
    created = of(sent, "tree.node_created")
    assert created == [{"role": "conductor"}, {"role": "worker", "parent_agent_id": "triage"}]
    incidents = of(sent, "incident.opened", "specialist")
    assert len(incidents) == 1 and incidents[0]["incident_kind"] == "guardrail"
    assert incidents[0]["title"] == "guardrail no_secrets tripped"
    assert statuses(sent, "specialist")[-1] == "failed"
    assert of(sent, "tree.node_status", "triage")[-1] == {"status": "failed", "reason": "guardrail_tripwire"}
    valid(sent)


def test_refusals_are_kept_not_raised(sent: list[canopy.Event]) -> None:
    """A target that refuses events does not stop the agent; flush() reports it."""
    def refuse(event: canopy.Event) -> None:
        raise RuntimeError("no room")

    tracer = openai_agents.install(refuse, exclusive=True)
    agent = Agent(name="a", model=ScriptedModel([ModelStep(output=[assistant_message("ok")])]))
    assert run(agent, "hi").final_output == "ok"
    with pytest.raises(canopy.adapters.AdapterError) as err:
        tracer.flush()
    assert err.value.count > 0 and "no room" in str(err.value)
    tracer.flush()  # reported once
