#!/usr/bin/env python3
"""A support desk of OpenAI Agents SDK agents, three levels deep, seen live in canopy.

    python3 examples/python/openai_agents_demo.py --brokers HOST:PORT [--run RUN]
    python3 examples/python/openai_agents_demo.py --dry-run   # print the events, no Kafka

triage hands the customer off to billing; billing reads the invoice and asks its refunds agent
(an agent used as a tool), which looks the order up and issues a refund, a tool that needs a
person's approval. The run stops for it, canopy shows the approval waiting (and wakes the
conductor), and the run resumes once a person decided: at once (--approve auto), or when a
person approves or rejects through canopy (--approve canopy: POST /v1/runs/RUN/input with
input_kind approve or reject, which this program takes from its wakes).

The agents, tools, handoffs and approvals are the SDK's own; only the model is scripted (no
network, no API key): ScriptedModel from agents.testing answers each call, and reports its
model name and token usage as the SDK's Chat Completions model does. One line feeds canopy:
canopy.adapters.openai_agents.install(producer).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from typing import Any

from agents import Agent, ModelProvider, RunConfig, Runner, function_tool
from agents.testing.model import ModelStep, ScriptedModel, assistant_message, function_call
from agents.tracing import generation_span
from agents.usage import Usage

import canopy
from canopy.adapters import openai_agents as canopy_agents
from human_approval import wait_for_decision


@function_tool
def get_invoice(order_id: str) -> str:
    """The invoice of an order."""
    return f"invoice {order_id}: 40 EUR, paid by card"


@function_tool
def lookup_order(order_id: str) -> str:
    """Where an order stands."""
    return f"order {order_id}: delivered damaged"


@function_tool(needs_approval=True)
def issue_refund(order_id: str, amount_eur: int) -> str:
    """Refund an order; a person approves each refund first."""
    return f"refunded {amount_eur} EUR on order {order_id}"


class ChatModel(ScriptedModel):
    """A scripted model that traces its calls as the SDK's Chat Completions model does: a
    generation span with the model's name and the call's usage."""

    def __init__(self, name: str, steps: list[ModelStep]) -> None:
        super().__init__(steps)
        self.name = name

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        tracing = args[6] if len(args) > 6 else kwargs["tracing"]
        with generation_span(model=self.name, model_config={}, disabled=tracing.is_disabled()) as span:
            response = await super().get_response(*args, **kwargs)
            u = response.usage
            span.span_data.usage = {"requests": 1, "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                                    "total_tokens": u.total_tokens}
            return response


def usage(inp: int, out: int) -> Usage:
    return Usage(requests=1, input_tokens=inp, output_tokens=out, total_tokens=inp + out)


class Scripts(ModelProvider):
    """The model provider: each agent's model name is its script."""

    def __init__(self) -> None:
        self.models = {
            "scripted-triage": ChatModel("scripted-triage", [
                ModelStep(output=[function_call("transfer_to_billing", {}, call_id="call-handoff")], usage=usage(120, 9)),
            ]),
            "scripted-billing": ChatModel("scripted-billing", [
                ModelStep(output=[function_call("get_invoice", {"order_id": "A1"}, call_id="call-invoice")],
                          usage=usage(210, 14)),
                ModelStep(output=[function_call("refunds", {"input": "refund order A1, 40 EUR"}, call_id="call-refunds")],
                          usage=usage(260, 18)),
                ModelStep(output=[assistant_message("Your order A1 is refunded: 40 EUR.")], usage=usage(330, 21)),
            ]),
            "scripted-refunds": ChatModel("scripted-refunds", [
                ModelStep(output=[function_call("lookup_order", {"order_id": "A1"}, call_id="call-lookup")],
                          usage=usage(90, 11)),
                ModelStep(output=[function_call("issue_refund", {"order_id": "A1", "amount_eur": 40},
                                                call_id="call-refund-a1")], usage=usage(140, 16)),
                ModelStep(output=[assistant_message("Refunded 40 EUR on order A1.")], usage=usage(170, 12)),
            ]),
        }

    def get_model(self, model_name: str | None) -> ScriptedModel:
        return self.models[model_name or ""]


def agents() -> Agent:
    """The desk: triage -> (handoff) billing -> (agent as tool) refunds."""
    refunds = Agent(name="refunds", model="scripted-refunds", instructions="Refund orders that arrived damaged.",
                    tools=[lookup_order, issue_refund])
    billing = Agent(name="billing", model="scripted-billing", instructions="Answer billing questions.",
                    tools=[get_invoice, refunds.as_tool(tool_name="refunds", tool_description="Refund an order.")])
    return Agent(name="triage", model="scripted-triage", instructions="Route the customer.", handoffs=[billing])


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", default=os.environ.get("CANOPY_BROKERS", "127.0.0.1:9092"))
    ap.add_argument("--prefix", default="canopy", help="the topics' prefix (canopy.agent-events.v1, ...)")
    ap.add_argument("--run", default="run-agents-" + uuid.uuid4().hex[:12])
    ap.add_argument("--approve", choices=("auto", "canopy"), default="auto",
                    help="who approves the refund: at once, or a person through canopy")
    ap.add_argument("--group", help="the consumer group that waits for the decision (default approvals-RUN)")
    ap.add_argument("--dry-run", action="store_true", help="print the events as JSON lines instead of producing them")
    args = ap.parse_args()

    producer: Any = canopy.Producer(args.brokers, source="/apps/openai-agents-demo", prefix=args.prefix) \
        if not args.dry_run else (lambda ev: print(ev.to_json(), flush=True))
    # The one line: every trace of the program becomes a canopy run (this one: args.run).
    tracer = canopy_agents.install(producer, run_id=args.run, exclusive=True)

    config = RunConfig(model_provider=Scripts(), workflow_name="support desk")
    desk = agents()
    result = await Runner.run(desk, "My order A1 arrived damaged: I want my money back.", run_config=config)
    while result.interruptions:
        tracer.interruptions(result)
        tracer.flush()
        state = result.to_state()
        decision = "approve"
        if args.approve == "canopy":
            decision = await asyncio.to_thread(wait_for_decision, args.brokers, args.run, prefix=args.prefix,
                                               group=args.group)
        for item in result.interruptions:
            if decision == "approve":
                tracer.approve(state, item)
            else:
                tracer.reject(state, item, rejection_message="A person refused the refund.")
        result = await Runner.run(desk, state, run_config=config)
    tracer.flush()
    print(f"run {args.run}: {result.final_output}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
