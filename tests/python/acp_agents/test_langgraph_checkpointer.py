"""A LangGraph graph compiled with the AgentEx SDK's own checkpointer (`adk.create_checkpointer()`,
its HTTP checkpointer over `/agentex/checkpoints`), configured as an agent runs it: the agent key
in `AGENT_API_KEY`, the task's id as the thread. Its state survives between runs, an interrupt
waits in the thread and resumes, the history reads back newest first, and deleting the thread
forgets it; another agent's key reaches none of it."""

import asyncio
import operator
from typing import Annotated, TypedDict

import httpx
import pytest
from agentex.lib import environment_variables
from agentex.lib.adk._modules.checkpointer import create_checkpointer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from conftest import raw, unique


class State(TypedDict):
    items: Annotated[list, operator.add]
    count: int


def count(state):
    return {"items": [f"item {state['count']}"], "count": state["count"] + 1}


def ask(state):
    return {"items": [f"answer: {interrupt({'question': 'go on?'})}"]}


def graph(checkpointer):
    g = StateGraph(State)
    g.add_node("count", count)
    g.add_node("ask", ask)
    g.add_edge(START, "count")
    g.add_edge("count", "ask")
    g.add_edge("ask", END)
    return g.compile(checkpointer=checkpointer)


def register(server, name):
    status, reg = raw(server, "POST", "/agentex/agents/register", {"name": name, "description": "d", "acp_url": "http://127.0.0.1:9", "acp_type": "sync"})
    assert status == 200, reg
    return reg


def as_agent(monkeypatch, server, reg):
    """The environment an SDK agent runs in (the checkpointer reads its key from it). The SDK
    reads it once per process, as one process is one agent: here it reads it again."""
    monkeypatch.setattr(environment_variables, "refreshed_environment_variables", None)
    monkeypatch.setenv("AGENTEX_BASE_URL", server.url("/agentex"))
    monkeypatch.setenv("AGENT_API_KEY", reg["agent_api_key"])
    monkeypatch.setenv("AGENT_NAME", reg["name"])
    monkeypatch.setenv("ACP_URL", "http://127.0.0.1:9")


def test_a_langgraph_agent_keeps_its_thread_in_its_task(server, client, monkeypatch):
    reg = register(server, unique("graph"))
    task = client.agents.create_task(agent_id=reg["id"], params={}).result
    as_agent(monkeypatch, server, reg)

    async def run():
        app = graph(await create_checkpointer())
        config = {"configurable": {"thread_id": task.id}}
        first = await app.ainvoke({"items": ["start"], "count": 0}, config)
        assert first["items"] == ["start", "item 0"] and first["__interrupt__"][0].value == {"question": "go on?"}
        waiting = await app.aget_state(config)
        assert waiting.next == ("ask",) and [i.value for i in waiting.interrupts] == [{"question": "go on?"}]
        resumed = await app.ainvoke(Command(resume="yes"), config)
        assert resumed == {"items": ["start", "item 0", "answer: yes"], "count": 1}
        again = await app.ainvoke({"items": ["again"], "count": 5}, config)
        assert again["items"] == ["start", "item 0", "answer: yes", "again", "item 5"] and again["count"] == 6
        history = [h async for h in app.aget_state_history(config)]
        assert [h.metadata["step"] for h in history] == [5, 4, 3, 2, 1, 0, -1]
        older = [h async for h in app.aget_state_history(config, before=history[1].config, limit=2)]
        assert [h.metadata["step"] for h in older] == [3, 2]
        assert (await app.aget_state(history[3].config)).values == {"items": ["start", "item 0", "answer: yes"], "count": 1}
        await app.checkpointer.adelete_thread(task.id)
        assert (await app.aget_state(config)).values == {}

    asyncio.run(run())


def test_another_agents_key_reaches_none_of_the_thread(server, client, monkeypatch):
    mine, theirs = register(server, unique("mine")), register(server, unique("theirs"))
    task = client.agents.create_task(agent_id=mine["id"], params={}).result
    config = {"configurable": {"thread_id": task.id}}
    as_agent(monkeypatch, server, mine)

    async def start():
        await graph(await create_checkpointer()).ainvoke({"items": [], "count": 0}, config)

    asyncio.run(start())
    as_agent(monkeypatch, server, theirs)

    async def intrude():
        app = graph(await create_checkpointer())
        with pytest.raises(httpx.HTTPStatusError) as e:
            await app.aget_state(config)
        assert e.value.response.status_code == 404
        with pytest.raises(httpx.HTTPStatusError):
            await app.ainvoke({"items": ["theirs"], "count": 9}, config)

    asyncio.run(intrude())
    assert [c.metadata["step"] for c in client.checkpoints.list(thread_id=task.id)] == [1, 0, -1]
