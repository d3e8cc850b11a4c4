"""Adapters: agent frameworks feed canopy in a line or two, each mapping the framework's own
notions (agents, handoffs, tool calls, model calls, human-in-the-loop interrupts) onto canopy's
agent tree and activity events.

    canopy.adapters.openai_agents   the OpenAI Agents SDK, as a tracing processor
    canopy.adapters.langgraph       LangGraph, as a LangChain callback handler

Each sends through a canopy.Producer, or any callable that takes a canopy.Event (a list's
append, in a test). The framework is an optional dependency: install the extra
(pip install 'canopy-agents[openai-agents]' or '[langgraph]'); importing an adapter without its
framework raises ImportError naming the extra. docs/adapters/ has each mapping, and what it loses.
"""

from ._common import AdapterError, Target

__all__ = ["AdapterError", "Target"]
