"""A person's approval through canopy, for the framework demos (openai_agents_demo.py,
langgraph_demo.py): wait until someone approves or rejects the run's request.

The person answers with the gateway (POST /v1/runs/RUN/input with input_kind approve or reject,
or the live view's input box); the gateway puts it on the human input topic, the projector wakes
the run's conductor with it first (the priority lane), and this conductor, a canopy.Conductor
of a consumer group of its own, takes it from that wake.
"""
from __future__ import annotations

import sys
import time

import canopy


def wait_for_decision(brokers: str, run_id: str, *, prefix: str = "canopy", group: str | None = None,
                      timeout: float = 600.0) -> str:
    """Block until a person approves or rejects run_id through canopy; return "approve" or
    "reject". Raises TimeoutError after timeout seconds."""
    decision: list[str] = []

    def handle(wake: canopy.Wake) -> None:
        if wake.run_id != run_id:
            return
        for trigger in wake.triggers:
            kind = (trigger.get("input") or {}).get("input_kind")
            if trigger.get("kind") == "human_input" and kind in ("approve", "reject"):
                decision.append(kind)

    print(f"run {run_id} waits for a person to approve or reject (input_kind approve or reject)",
          file=sys.stderr, flush=True)
    deadline = time.monotonic() + timeout
    with canopy.Conductor(brokers, group=group or f"approvals-{run_id}", prefix=prefix,
                          source="/apps/approvals") as conductor:
        while not decision:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no decision for run {run_id} within {timeout:.0f}s")
            conductor.poll_once(handle, 0.5)
    return decision[0]
