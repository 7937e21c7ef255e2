"""Push notifications: configs set, read, listed and deleted through the official client, and
sessiond's deliveries to a receiver in the test, with the token and credentials; internal
addresses the policy does not list are refused, when the config is set and when it is
delivered (the address checked is the one connected to)."""

import http.server
import json
import threading

import pytest

from conftest import connect, pb, rpc, run, strict, text_message, wait_for
from sessiond_server import Server


class Receiver:
    """An HTTP server on 127.0.0.1 that records what is posted to it."""

    def __init__(self):
        self.posts = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.posts.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": json.loads(body)})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, host="127.0.0.1"):
        return f"http://{host}:{self.port}/hook"

    def close(self):
        self.httpd.shutdown()


@pytest.fixture(scope="module")
def server():
    # Loopback listed by address; `*` lets public hosts in, never internal ones by name.
    s = Server(config='[policy]\na2a_push_hosts = ["127.0.0.1", "*"]\n')
    yield s
    s.close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def test_a_config_set_on_a_task_gets_its_next_state_with_token_and_credentials(server, agent, receiver):
    asked = rpc(server, agent, "SendMessage", {"message": {"messageId": "m", "parts": [{"text": "/ask Ready? | yes | no"}]}})
    task_id = asked["result"]["task"]["id"]

    async def go():
        client, http, _ = await connect(server, agent)
        try:
            made = await client.create_task_push_notification_config(pb.TaskPushNotificationConfig(
                task_id=task_id, id="cfg-1", url=receiver.url(), token="tok-123",
                authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="secret-cred")))
            got = await client.get_task_push_notification_config(pb.GetTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-1"))
            listed = await client.list_task_push_notification_configs(pb.ListTaskPushNotificationConfigsRequest(task_id=task_id))
            answered = [r async for r in client.send_message(pb.SendMessageRequest(message=text_message("yes", task_id)))]
            return made, got, listed, answered[-1].task
        finally:
            await client.close()
            await http.aclose()

    made, got, listed, answered = run(go())
    assert made.id == "cfg-1" and made.token == "tok-123"
    # Reads never show the secrets.
    assert got.url == receiver.url() and got.token == "" and got.authentication.credentials == ""
    assert got.authentication.scheme == "Bearer"
    assert [c.id for c in listed.configs] == ["cfg-1"]
    assert answered.status.state == pb.TASK_STATE_COMPLETED
    post = wait_for(lambda: receiver.posts and receiver.posts[0], what="the push notification")
    assert post["headers"]["x-a2a-notification-token"] == "tok-123"
    assert post["headers"]["authorization"] == "Bearer secret-cred"
    pushed = strict(post["body"], pb.StreamResponse())
    assert pushed.task.id == task_id
    assert pushed.task.status.state == pb.TASK_STATE_COMPLETED
    body = rpc(server, agent, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "cfg-1"})
    strict(body["result"], pb.TaskPushNotificationConfig())


def test_a_config_sent_with_a_message_delivers_the_new_tasks_end(server, agent, receiver):
    sent = rpc(server, agent, "SendMessage", {
        "message": {"messageId": "m", "parts": [{"text": "/slow 100\n/reply pushed"}]},
        "configuration": {"returnImmediately": True, "taskPushNotificationConfig": {"url": receiver.url()}},
    })
    task_id = sent["result"]["task"]["id"]
    post = wait_for(lambda: receiver.posts and receiver.posts[0], what="the push notification")
    task = strict(post["body"], pb.StreamResponse()).task
    assert task.id == task_id and task.status.state == pb.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == "pushed"


def test_deleted_configs_are_gone(server, agent, receiver):
    sent = rpc(server, agent, "SendMessage", {"message": {"messageId": "m", "parts": [{"text": "/ask Q? | a"}]}})
    task_id = sent["result"]["task"]["id"]
    made = rpc(server, agent, "CreateTaskPushNotificationConfig", {"taskId": task_id, "url": receiver.url()})
    config_id = made["result"]["id"]
    deleted = rpc(server, agent, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": config_id})
    assert deleted["result"] is None
    assert rpc(server, agent, "ListTaskPushNotificationConfigs", {"taskId": task_id})["result"]["configs"] == []
    assert rpc(server, agent, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": config_id})["error"]["code"] == -32602


def test_private_addresses_are_refused_when_set_and_when_connected_to(server, agent, receiver):
    sent = rpc(server, agent, "SendMessage", {"message": {"messageId": "m", "parts": [{"text": "/ask Q? | a"}]}})
    task_id = sent["result"]["task"]["id"]
    for url in ["http://10.1.2.3/hook", "http://169.254.169.254/latest", "http://[::1]:9/x", "ftp://example.com/"]:
        body = rpc(server, agent, "CreateTaskPushNotificationConfig", {"taskId": task_id, "url": url})
        assert body["error"]["code"] == -32602, (url, body)
    refused = rpc(server, agent, "SendMessage", {
        "message": {"messageId": "m", "parts": [{"text": "hi"}]},
        "configuration": {"taskPushNotificationConfig": {"url": "http://192.168.0.10/x"}},
    })
    assert refused["error"]["code"] == -32602
    # `localhost` passes the wildcard by name, but the address it connects to is loopback, which
    # only the listed 127.0.0.1 may reach: that delivery is refused, the listed one made.
    other = Receiver()
    try:
        first = rpc(server, agent, "CreateTaskPushNotificationConfig", {"taskId": task_id, "id": "a", "url": other.url("localhost")})
        assert "result" in first, first
        second = rpc(server, agent, "CreateTaskPushNotificationConfig", {"taskId": task_id, "id": "b", "url": receiver.url()})
        assert "result" in second, second
        rpc(server, agent, "SendMessage", {"message": {"messageId": "m2", "taskId": task_id, "parts": [{"text": "a"}]}})
        wait_for(lambda: receiver.posts, what="the listed receiver's notification")
        assert other.posts == []
    finally:
        other.close()
