"""The official client's surface, listed: every public method of every resource and sub-resource
of `Agentex` is either in COVERED, with the tests (in the Python suites under `tests/python/`)
that call it. A client upgrade that adds a method, a test renamed or
removed, or a test that no longer calls the method it is listed for, fails here.

A test "calls" a method when its body, or a function of its own file or of its suite's
`conftest.py` that it calls, names the method's attribute path (`client.tasks.fail`,
`c.agents.deployments.list`, also through `with_raw_response` and `with_streaming_response`).
"""

import ast
import inspect
import os

from agentex import Agentex
from agentex._resource import SyncAPIResource

# tests/python, where every suite's files are.
SUITES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WRAPPERS = {"with_raw_response", "with_streaming_response"}


# Each method, and the tests (`<suite>/<file>::<test>`) that call it.
COVERED = {
    "deployment_history.list": ["agentex_client/test_history_webhooks.py::test_every_deployment_change_is_in_the_history"],
    "deployment_history.retrieve": ["agentex_client/test_history_webhooks.py::test_every_deployment_change_is_in_the_history"],
    "webhooks.create_webhook_trigger": [
        "agentex_client/test_history_webhooks.py::test_a_github_trigger_starts_a_task_per_signed_delivery",
        "agentex_client/test_history_webhooks.py::test_bad_trigger_requests_are_refused",
    ],
    "checkpoints.delete_thread": ["agentex_client/test_checkpoints.py::test_every_checkpoint_method_keeps_langgraphs_contract"],
    "checkpoints.get_tuple": ["agentex_client/test_checkpoints.py::test_every_checkpoint_method_keeps_langgraphs_contract"],
    "checkpoints.list": ["agentex_client/test_checkpoints.py::test_every_checkpoint_method_keeps_langgraphs_contract"],
    "checkpoints.put": ["agentex_client/test_checkpoints.py::test_every_checkpoint_method_keeps_langgraphs_contract"],
    "checkpoints.put_writes": ["agentex_client/test_checkpoints.py::test_every_checkpoint_method_keeps_langgraphs_contract"],
    "tasks.query_workflow": ["agentex_client/test_checkpoints.py::test_workflow_queries_answer_status_and_state"],
    "agents.cancel_task": [
        "agentex_client/test_rpc.py::test_cancel_stops_the_turn_for_good",
        "agentex_client/test_rpc.py::test_cancel_drops_queued_messages",
    ],
    "agents.create_task": [
        "agentex_client/test_rpc.py::test_task_create_is_get_or_create_by_name",
        "agentex_client/test_rpc.py::test_concurrent_get_or_create_makes_one_task",
    ],
    "agents.delete": [
        "agentex_client/test_agents.py::test_delete_by_id_and_by_name",
        "agentex_client/test_agents.py::test_an_agent_with_tasks_or_the_root_agent_is_not_deleted",
    ],
    "agents.delete_by_name": [
        "agentex_client/test_agents.py::test_delete_by_id_and_by_name",
        "agentex_client/test_agents.py::test_an_agent_with_tasks_or_the_root_agent_is_not_deleted",
    ],
    "agents.deployments.create": [
        "agentex_client/test_deployments.py::test_create_list_retrieve_delete",
        "agentex_client/test_deployments.py::test_preview_rpc_runs_a_deployments_engine_without_promoting_it",
    ],
    "agents.deployments.delete": [
        "agentex_client/test_deployments.py::test_create_list_retrieve_delete",
        "agentex_client/test_deployments.py::test_promote_makes_exactly_one_production_deployment",
    ],
    "agents.deployments.list": [
        "agentex_client/test_deployments.py::test_create_list_retrieve_delete",
        "agentex_client/test_deployments.py::test_an_engine_the_policy_forbids_is_refused",
    ],
    "agents.deployments.preview_rpc": [
        "agentex_client/test_deployments.py::test_preview_rpc_runs_a_deployments_engine_without_promoting_it",
        "agentex_client/test_deployments.py::test_streamed_preview_carries_reasoning_deltas",
    ],
    "agents.deployments.promote": ["agentex_client/test_deployments.py::test_promote_makes_exactly_one_production_deployment"],
    "agents.deployments.retrieve": [
        "agentex_client/test_deployments.py::test_create_list_retrieve_delete",
        "agentex_client/test_deployments.py::test_preview_rpc_runs_a_deployments_engine_without_promoting_it",
    ],
    "agents.list": [
        "agentex_client/test_agents.py::test_list_filters_orders_and_pages",
        "agentex_client/test_agents.py::test_list_by_task",
    ],
    "agents.register_build": [
        "agentex_client/test_agents.py::test_register_build_is_idempotent_by_name",
        "agentex_client/test_agents.py::test_register_build_refuses_bad_names",
    ],
    "agents.retrieve": [
        "agentex_client/test_agents.py::test_retrieve_by_id_and_name",
        "agentex_client/test_agents.py::test_delete_by_id_and_by_name",
    ],
    "agents.retrieve_by_name": [
        "agentex_client/test_agents.py::test_retrieve_by_id_and_name",
        "agentex_client/test_agents.py::test_an_agent_is_sessionds_agent",
    ],
    "agents.rpc": [
        "agentex_client/test_rpc.py::test_a_failed_turn_is_an_rpc_error",
        "agentex_client/test_rpc.py::test_rpc_errors_carry_the_standard_codes",
    ],
    "agents.rpc_by_name": [
        "agentex_client/test_agents.py::test_credentials_and_scopes",
        "agentex_client/test_rpc.py::test_message_send_answers_with_the_agents_messages",
    ],
    "agents.schedules.create": [
        "agentex_schedules/test_schedules.py::test_create_retrieve_list_update_and_delete",
        "agentex_schedules/test_schedules.py::test_a_restart_keeps_schedules_and_the_sessions_they_made",
    ],
    "agents.schedules.delete": ["agentex_schedules/test_schedules.py::test_create_retrieve_list_update_and_delete"],
    "agents.schedules.delete_by_name": ["agentex_schedules/test_schedules.py::test_create_retrieve_list_update_and_delete"],
    "agents.schedules.list": [
        "agentex_schedules/test_schedules.py::test_create_retrieve_list_update_and_delete",
        "agentex_schedules/test_schedules.py::test_bad_input_is_refused_and_changes_nothing",
    ],
    "agents.schedules.pause": [
        "agentex_schedules/test_schedules.py::test_pause_resume_skip_unskip_and_trigger",
        "agentex_schedules/test_schedules.py::test_a_restart_keeps_schedules_and_the_sessions_they_made",
    ],
    "agents.schedules.pause_by_name": ["agentex_schedules/test_schedules.py::test_pause_resume_skip_unskip_and_trigger"],
    "agents.schedules.resume": ["agentex_schedules/test_schedules.py::test_pause_resume_skip_unskip_and_trigger"],
    "agents.schedules.resume_by_name": ["agentex_schedules/test_schedules.py::test_pause_resume_skip_unskip_and_trigger"],
    "agents.schedules.retrieve": [
        "agentex_schedules/test_schedules.py::test_create_retrieve_list_update_and_delete",
        "agentex_schedules/test_schedules.py::test_an_interval_schedule_fires_sessions",
    ],
    "agents.schedules.retrieve_by_name": [
        "agentex_schedules/test_schedules.py::test_create_retrieve_list_update_and_delete",
        "agentex_schedules/test_schedules.py::test_a_restart_keeps_schedules_and_the_sessions_they_made",
    ],
    "agents.schedules.skip": ["agentex_schedules/test_schedules.py::test_pause_resume_skip_unskip_and_trigger"],
    "agents.schedules.trigger": [
        "agentex_schedules/test_schedules.py::test_pause_resume_skip_unskip_and_trigger",
        "agentex_schedules/test_schedules.py::test_bad_input_is_refused_and_changes_nothing",
    ],
    "agents.schedules.trigger_by_name": ["agentex_schedules/test_schedules.py::test_pause_resume_skip_unskip_and_trigger"],
    "agents.schedules.unskip": ["agentex_schedules/test_schedules.py::test_pause_resume_skip_unskip_and_trigger"],
    "agents.schedules.update": [
        "agentex_schedules/test_schedules.py::test_create_retrieve_list_update_and_delete",
        "agentex_schedules/test_schedules.py::test_new_york_nine_am_is_13_utc_in_summer_and_14_utc_in_winter",
    ],
    "agents.schedules.update_by_name": ["agentex_schedules/test_schedules.py::test_create_retrieve_list_update_and_delete"],
    "agents.send_event": [
        "agentex_client/test_rpc.py::test_event_send_records_an_event_and_runs_a_turn",
        "acp_agents/test_async_agent.py::test_events_become_the_agents_messages_and_state",
    ],
    "agents.send_message": [
        "agentex_client/test_rpc.py::test_message_send_answers_with_the_agents_messages",
        "agentex_client/test_rpc.py::test_message_send_without_a_task_opens_one",
    ],
    "agents.send_message_stream": [
        "acp_agents/test_sync_agent.py::test_message_send_whole_and_streamed",
        "agentex_client/test_rpc.py::test_streamed_message_deltas_join_to_the_scripted_text",
    ],
    "events.list": [
        "agentex_client/test_rpc.py::test_event_send_records_an_event_and_runs_a_turn",
        "agentex_client/test_tasks.py::test_tasks_survive_a_restart",
    ],
    "events.retrieve": ["agentex_client/test_rpc.py::test_event_send_records_an_event_and_runs_a_turn"],
    "messages.batch.create": [
        "agentex_client/test_records.py::test_messages_added_by_a_client",
        "agentex_client/test_records.py::test_messages_revised_by_the_agent",
    ],
    "messages.batch.update": ["agentex_client/test_records.py::test_messages_revised_by_the_agent"],
    "messages.create": [
        "agentex_client/test_records.py::test_messages_added_by_a_client",
        "agentex_client/test_records.py::test_messages_revised_by_the_agent",
    ],
    "messages.list": [
        "agentex_client/test_records.py::test_messages_list_by_page",
        "agentex_client/test_records.py::test_messages_added_by_a_client",
    ],
    "messages.list_paginated": [
        "agentex_client/test_records.py::test_messages_by_cursor_both_ways",
        "agentex_client/test_records.py::test_messages_revised_by_the_agent",
    ],
    "messages.retrieve": [
        "agentex_client/test_records.py::test_messages_added_by_a_client",
        "agentex_client/test_records.py::test_messages_revised_by_the_agent",
    ],
    "messages.update": ["agentex_client/test_records.py::test_messages_revised_by_the_agent"],
    "spans.create": ["agentex_client/test_records.py::test_spans"],
    "spans.list": ["agentex_client/test_records.py::test_spans"],
    "spans.retrieve": ["agentex_client/test_records.py::test_spans"],
    "spans.update": ["agentex_client/test_records.py::test_spans"],
    "states.create": ["agentex_client/test_records.py::test_states"],
    "states.delete": ["agentex_client/test_records.py::test_states"],
    "states.list": [
        "agentex_client/test_records.py::test_states",
        "acp_agents/test_async_agent.py::test_events_become_the_agents_messages_and_state",
    ],
    "states.retrieve": ["agentex_client/test_records.py::test_states"],
    "states.update": ["agentex_client/test_records.py::test_states"],
    "tasks.cancel": [
        "acp_agents/test_async_agent.py::test_cancel_reaches_the_agent",
        "agentex_client/test_tasks.py::test_final_statuses",
    ],
    "tasks.complete": ["agentex_client/test_tasks.py::test_final_statuses"],
    "tasks.delete": [
        "agentex_client/test_tasks.py::test_delete_by_id_and_name",
        "agentex_client/test_tasks.py::test_the_stream_by_name_sees_interrupts",
    ],
    "tasks.delete_by_name": ["agentex_client/test_tasks.py::test_delete_by_id_and_name"],
    "tasks.fail": ["agentex_client/test_tasks.py::test_final_statuses"],
    "tasks.interrupt": [
        "agentex_client/test_tasks.py::test_rest_interrupt_of_a_running_turn",
        "acp_agents/test_sync_agent.py::test_an_interrupt_closes_the_agents_stream",
    ],
    "tasks.list": [
        "agentex_client/test_tasks.py::test_list_filters_and_the_lean_form",
        "agentex_client/test_agents.py::test_workspaces_are_isolated",
    ],
    "tasks.retrieve": [
        "agentex_client/test_tasks.py::test_retrieve_by_id_and_name_with_the_agent",
        "agentex_client/test_agents.py::test_workspaces_are_isolated",
    ],
    "tasks.retrieve_by_name": [
        "agentex_client/test_tasks.py::test_retrieve_by_id_and_name_with_the_agent",
        "agentex_client/test_agents.py::test_workspaces_are_isolated",
    ],
    "tasks.stream_events": ["agentex_client/test_tasks.py::test_the_stream_carries_updates_status_changes_and_ends_when_final"],
    "tasks.stream_events_by_name": ["agentex_client/test_tasks.py::test_the_stream_by_name_sees_interrupts"],
    "tasks.terminate": ["agentex_client/test_tasks.py::test_final_statuses"],
    "tasks.timeout": ["agentex_client/test_tasks.py::test_final_statuses"],
    "tasks.update_by_id": ["agentex_client/test_tasks.py::test_update_merges_params_and_replaces_metadata"],
    "tasks.update_by_name": ["agentex_client/test_tasks.py::test_update_merges_params_and_replaces_metadata"],
    "tracker.list": ["agentex_client/test_records.py::test_trackers"],
    "tracker.retrieve": ["agentex_client/test_records.py::test_trackers"],
    "tracker.update": ["agentex_client/test_records.py::test_trackers"],

}


def client_methods():
    """`resource.sub.method` for every public method of every resource of the client."""
    client = Agentex(api_key="unused", base_url="http://127.0.0.1:9/agentex")
    found = set()

    def walk(obj, path):
        for name in dir(type(obj)):
            if name.startswith("_") or name in WRAPPERS:
                continue
            value = getattr(obj, name)
            if isinstance(value, SyncAPIResource):
                walk(value, path + [name])
            elif path and inspect.ismethod(value):
                found.add(".".join(path + [name]))

    try:
        walk(client, [])
    finally:
        client.close()
    return found


def module_functions(path):
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def attribute_path(node):
    """`a.b.with_raw_response.c` as ("b", "c"): the attributes after the base name, wrappers left out."""
    parts = []
    while isinstance(node, ast.Attribute):
        if node.attr not in WRAPPERS:
            parts.append(node.attr)
        node = node.value
    return tuple(reversed(parts))


def paths_reached(function, functions, seen):
    """Every attribute path in `function`, and in the functions of `functions` it calls."""
    paths = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Attribute):
            paths.add(attribute_path(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            callee = node.func.id
            if callee in functions and callee not in seen:
                seen.add(callee)
                paths |= paths_reached(functions[callee], functions, seen)
    return paths


def test_every_client_method_is_listed():
    methods = client_methods()
    assert methods, "no methods found: the client's layout changed"
    unlisted = sorted(methods - COVERED.keys())
    assert not unlisted, f"client methods with no test listed: {unlisted}"
    unknown = sorted(COVERED.keys() - methods)
    assert not unknown, f"listed, but not methods of the client: {unknown}"


def test_every_listed_test_exists_and_calls_its_method():
    problems = []
    files = {}
    for method, tests in sorted(COVERED.items()):
        if not tests:
            problems.append(f"{method}: no test named")
        wanted = tuple(method.split("."))
        for test in tests:
            where, _, name = test.partition("::")
            path = os.path.join(SUITES, where)
            if not os.path.isfile(path):
                problems.append(f"{method}: no file {where}")
                continue
            if path not in files:
                conftest = os.path.join(os.path.dirname(path), "conftest.py")
                shared = module_functions(conftest) if os.path.isfile(conftest) else {}
                files[path] = {**shared, **module_functions(path)}
            functions = files[path]
            if not name.startswith("test_") or name not in functions:
                problems.append(f"{method}: no test {name} in {where}")
                continue
            reached = paths_reached(functions[name], functions, {name})
            if not any(p[-len(wanted):] == wanted for p in reached):
                problems.append(f"{method}: {test} does not call it")
    assert not problems, "\n".join(problems)
