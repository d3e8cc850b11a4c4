#!/usr/bin/env python3
"""A LangGraph support desk, three levels of agents deep, seen live in canopy.

    python3 examples/python/langgraph_demo.py --brokers HOST:PORT [--run RUN]
    python3 examples/python/langgraph_demo.py --dry-run   # print the events, no Kafka

A supervisor graph routes the customer to its billing team, a subgraph (a ReAct agent: a model
node and a tool node); billing reads the invoice and asks its refunds agent, another graph it
calls as a tool, which looks the order up and issues a refund: a tool that calls interrupt() for
a person's approval. The graph stops (its checkpointer keeps it), canopy shows the approval
waiting (and wakes the conductor), and the graph resumes with Command(resume=...) once a person
decided: at once (--approve auto), or when a person approves or rejects through canopy
(--approve canopy: POST /v1/runs/RUN/input with input_kind approve or reject).

The graphs, tools, checkpointer and interrupt are LangGraph's own; only the chat model is
scripted (no network, no API key): ScriptedChatModel answers each call with the next message of
its script, tool calls and token usage included. One line feeds canopy: the
canopy.adapters.langgraph.CanopyCallbackHandler in the graph's callbacks.
"""
from __future__ import annotations

import argparse
import os
import sys
import uuid
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

import canopy
from canopy.adapters.langgraph import CanopyCallbackHandler
from human_approval import wait_for_decision


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers each call with the next message of its script."""

    model_name: str
    script: list[AIMessage]
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self  # the script already knows which tools it calls

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        message = self.script[self.calls]
        self.calls += 1
        return ChatResult(generations=[ChatGeneration(message=message)], llm_output={"model_name": self.model_name})


def say(text: str = "", calls: tuple[tuple[str, dict[str, Any], str], ...] = (), *, tokens: tuple[int, int]) -> AIMessage:
    """A scripted answer: text, tool calls (name, arguments, id), and its token usage."""
    return AIMessage(content=text, tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in calls],
                     usage_metadata={"input_tokens": tokens[0], "output_tokens": tokens[1],
                                     "total_tokens": tokens[0] + tokens[1]})


@tool
def get_invoice(order_id: str) -> str:
    """The invoice of an order."""
    return f"invoice {order_id}: 40 EUR, paid by card"


@tool
def lookup_order(order_id: str) -> str:
    """Where an order stands."""
    return f"order {order_id}: delivered damaged"


@tool
def issue_refund(order_id: str, amount_eur: int) -> str:
    """Refund an order; a person approves each refund first."""
    decision = interrupt({"kind": "approval", "action": "issue_refund", "order_id": order_id, "amount_eur": amount_eur})
    if decision != "approve":
        return f"a person refused the refund of order {order_id}"
    return f"refunded {amount_eur} EUR on order {order_id}"


def react_agent(name: str, model: ScriptedChatModel, tools: list[Any]) -> CompiledStateGraph:
    """An agent as LangGraph builds one: a model node, a tool node, and the loop between them."""
    g = StateGraph(MessagesState)
    g.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "model")
    return g.compile(name=name)


def desk() -> CompiledStateGraph:
    """support (supervisor) -> billing (a subgraph) -> refunds (a graph billing calls as a tool)."""
    refunds = react_agent("refunds", ScriptedChatModel(model_name="scripted-refunds", script=[
        say(calls=(("lookup_order", {"order_id": "A1"}, "call-lookup"),), tokens=(90, 11)),
        say(calls=(("issue_refund", {"order_id": "A1", "amount_eur": 40}, "call-refund-a1"),), tokens=(140, 16)),
        say("Refunded 40 EUR on order A1.", tokens=(170, 12)),
    ]), [lookup_order, issue_refund])

    @tool
    def ask_refunds(request: str) -> str:
        """Ask the refunds agent to refund an order."""
        out = refunds.invoke({"messages": [("user", request)]})
        return str(out["messages"][-1].content)

    billing = react_agent("billing", ScriptedChatModel(model_name="scripted-billing", script=[
        say(calls=(("get_invoice", {"order_id": "A1"}, "call-invoice"),), tokens=(210, 14)),
        say(calls=(("ask_refunds", {"request": "refund order A1, 40 EUR"}, "call-refunds"),), tokens=(260, 18)),
        say("Your order A1 is refunded: 40 EUR.", tokens=(330, 21)),
    ]), [get_invoice, ask_refunds])

    supervisor_model = ScriptedChatModel(model_name="scripted-supervisor", script=[
        say("billing", tokens=(120, 9)),
        say("Done: order A1 refunded.", tokens=(400, 10)),
    ])

    def supervisor(state: MessagesState) -> dict[str, Any]:
        return {"messages": [supervisor_model.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        return "billing" if state["messages"][-1].content == "billing" else END

    g = StateGraph(MessagesState)
    g.add_node("supervisor", supervisor)
    g.add_node("billing", billing)
    g.add_edge(START, "supervisor")
    g.add_conditional_edges("supervisor", route, ["billing", END])
    g.add_edge("billing", "supervisor")
    return g.compile(name="support", checkpointer=InMemorySaver())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", default=os.environ.get("CANOPY_BROKERS", "127.0.0.1:9092"))
    ap.add_argument("--prefix", default="canopy", help="the topics' prefix (canopy.agent-events.v1, ...)")
    ap.add_argument("--run", default="run-graph-" + uuid.uuid4().hex[:12], help="the run, and the graph's thread")
    ap.add_argument("--approve", choices=("auto", "canopy"), default="auto",
                    help="who approves the refund: at once, or a person through canopy")
    ap.add_argument("--group", help="the consumer group that waits for the decision (default approvals-RUN)")
    ap.add_argument("--dry-run", action="store_true", help="print the events as JSON lines instead of producing them")
    args = ap.parse_args()

    producer: Any = canopy.Producer(args.brokers, source="/apps/langgraph-demo", prefix=args.prefix) \
        if not args.dry_run else (lambda ev: print(ev.to_json(), flush=True))
    handler = CanopyCallbackHandler(producer)
    # The one line: the graph's runs (the thread's, here args.run) feed canopy.
    app = desk().with_config(callbacks=[handler])

    config: Any = {"configurable": {"thread_id": args.run}}
    out = app.invoke({"messages": [("user", "My order A1 arrived damaged: I want my money back.")]}, config)
    while out.get("__interrupt__"):
        handler.flush()
        decision = "approve"
        if args.approve == "canopy":
            decision = wait_for_decision(args.brokers, args.run, prefix=args.prefix, group=args.group)
        out = app.invoke(Command(resume=decision), config)
    handler.flush()
    print(f"run {args.run}: {out['messages'][-1].content}", file=sys.stderr)


if __name__ == "__main__":
    main()
