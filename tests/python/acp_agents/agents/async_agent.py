"""An async agent written with the AgentEx SDK ("base" async ACP, as the SDK's own template):
it answers each event with a message written through the API and counts events in its state."""

from agentex.lib import adk
from agentex.lib.sdk.fastacp.fastacp import FastACP
from agentex.lib.types.fastacp import AsyncACPConfig
from agentex.protocol.acp import CancelTaskParams, CreateTaskParams, SendEventParams
from agentex.types.text_content import TextContent

from record import record, watch_keys

acp = FastACP.create(acp_type="async", config=AsyncACPConfig(type="base"))
watch_keys(acp)


@acp.on_task_create
async def handle_task_create(params: CreateTaskParams):
    record("task/create", task_id=params.task.id, params=params.params, acp_type=params.agent.acp_type)
    await adk.state.create(task_id=params.task.id, agent_id=params.agent.id, state={"events": 0})


@acp.on_task_event_send
async def handle_event_send(params: SendEventParams):
    text = params.event.content.content if params.event.content else ""
    record("event/send", task_id=params.task.id, event_id=params.event.id, text=text)
    await adk.messages.create(
        task_id=params.task.id,
        content=TextContent(author="agent", content=f"got: {text}"),
    )
    state = await adk.state.get_by_task_and_agent(task_id=params.task.id, agent_id=params.agent.id)
    if state is None:
        await adk.state.create(task_id=params.task.id, agent_id=params.agent.id, state={"events": 1})
    else:
        await adk.state.update(
            state_id=state.id,
            task_id=params.task.id,
            agent_id=params.agent.id,
            state={"events": state.state.get("events", 0) + 1},
        )
    record("handled", task_id=params.task.id, text=text)


@acp.on_task_cancel
async def handle_task_cancel(params: CancelTaskParams):
    record("task/cancel", task_id=params.task.id)
