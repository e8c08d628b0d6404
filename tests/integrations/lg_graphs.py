"""The graphs the LangGraph tests and ``benchmarks.langgraph`` run: a scripted model (LangGraph's
fake chat model, offline) and the agent → tools → agent loop ``create_agent`` builds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langgraph.graph import END, START, MessagesState, StateGraph


class Scripted(GenericFakeChatModel):
    """The fake chat model, able to drive a ToolNode (it has no ``bind_tools`` of its own). It
    answers whole, never streamed (the fake streams text only: a message of tool calls would
    stream nothing under ``astream_events``)."""

    disable_streaming: bool = True

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def agent_graph(
    node: Any,
    model: Any,
    checkpointer: Any = None,
    *,
    on_model: Callable[[], None] | None = None,
) -> Any:
    """agent → tools → agent, until the model asks for no tool; ``on_model`` is told each time
    the model is asked."""

    async def agent(state: MessagesState) -> dict[str, Any]:
        if on_model is not None:
            on_model()
        return {"messages": [await model.ainvoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", node)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: "tools" if s["messages"][-1].tool_calls else END)
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer)


def parent_of(sub: Any, checkpointer: Any, *, called: bool = False) -> Any:
    """A graph whose one node is the subgraph ``sub``, or (``called``) a function that runs it:
    LangGraph sees the subgraph either way."""

    async def runs_it(state: MessagesState) -> Any:
        return await sub.ainvoke(state)

    g = StateGraph(MessagesState)
    g.add_node("sub", runs_it if called else sub)
    g.add_edge(START, "sub")
    g.add_edge("sub", END)
    return g.compile(checkpointer=checkpointer)
