"""The external-env server (``input: "external"``) against hostile or careless clients:
numbers that overflow what is stored, JSON the parser cannot take, oversized info and
episodes, stalled or trickled requests, too many connections, other clients' episodes.

Every server listens on 127.0.0.1 on a free port; raw sockets are closed by the tests
(``with``) and every wait is bounded.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import numpy as np
import pytest

from hierl.algorithms.ppo import PPOTrainer
from hierl.config import ConfigError
from hierl.serve.client import PolicyClient, PolicyClientError
from tests.support.helpers import EXTERNAL_PPO

pytestmark = pytest.mark.timeout(60)

SMALL = EXTERNAL_PPO
OBS = [0.01, 0.02, 0.03, 0.04]


def trainer_with(**external) -> PPOTrainer:
    return PPOTrainer({**SMALL, "input_external": {"port": 0, **external}})


def address(trainer: PPOTrainer) -> tuple[str, int]:
    return trainer.evaluators.local_evaluator.address


def url_of(trainer: PPOTrainer) -> str:
    return "http://{}:{}".format(*address(trainer))


def request(trainer, method, path, body=None, headers=None) -> tuple[int, dict]:
    """``(status, JSON answer)``; a dropped connection raises (http.client's error)."""
    conn = http.client.HTTPConnection(*address(trainer), timeout=10)
    try:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=headers or {})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def post(trainer, path, body, headers=None) -> tuple[int, dict]:
    return request(trainer, "POST", path, body, headers)


# -- numbers are checked as they are stored ----------------------------------------------
def test_numbers_beyond_float32_are_refused_on_every_route_and_the_filter_is_unchanged():
    """1e300 is finite in JSON (and in float64) but infinite in float32, which is what
    observations, rewards and log-likelihoods are stored in."""
    with PPOTrainer({**SMALL, "observation_filter": "MeanStdFilter"}) as trainer:
        evaluator = trainer.evaluators.local_evaluator
        client = PolicyClient(url_of(trainer))
        episode = client.start_episode()
        assert client.get_action(episode, OBS) in (0, 1)
        filter_before = evaluator.filters["default_policy"].normalization()
        steps_before = len(evaluator.episodes.live[episode].actions)
        huge = [0.0, 0.0, 1e300, 0.0]
        path = f"/episodes/{episode}"
        cases = [
            ("action", {"observation": huge}, "observation"),
            ("action", {"observation": OBS, "reward": 1e300}, "reward"),
            ("action", {"observation": OBS, "reward": -(10**400)}, "reward"),
            ("log_action", {"observation": huge, "action": 0}, "observation"),
            ("log_action", {"observation": OBS, "action": 0, "action_logp": 1e300}, "action_logp"),
            (
                "log_action",
                {
                    "observation": OBS,
                    "action": 0,
                    "action_logp": -0.5,
                    "action_dist_inputs": [1e300, 0],
                },
                "action_dist_inputs",
            ),
            ("returns", {"reward": 1e300}, "reward"),
            ("end", {"observation": huge}, "observation"),
            ("end", {"observation": OBS, "reward": 1e39}, "reward"),
        ]
        for command, body, field in cases:
            status, answer = post(trainer, f"{path}/{command}", body)
            assert status == 400, (command, body, answer)
            assert answer["field"] == field, (command, answer)
            assert "float32" in answer["error"] or "finite" in answer["error"], answer
        # two rewards finite in float32 whose sum is not
        assert post(trainer, f"{path}/returns", {"reward": 3e38})[0] == 200
        status, answer = post(trainer, f"{path}/returns", {"reward": 3e38})
        assert status == 400 and answer["field"] == "reward" and "add up" in answer["error"]
        # the same through /events (local-inference clients)
        events = [
            {"command": "log_action", "episode_id": episode, "observation": huge, "action": 1},
            {"command": "returns", "episode_id": episode, "reward": 1e300},
        ]
        status, answer = post(trainer, "/events", {"events": events})
        assert status == 200 and answer["failed"] == [0, 1]
        assert [r["status"] for r in answer["results"]] == [400, 400]
        # nothing refused reached the episode or the filter's statistics
        live = evaluator.episodes.live[episode]
        assert len(live.actions) == steps_before and live.pending_reward == pytest.approx(3e38)
        for before, after in zip(
            filter_before, evaluator.filters["default_policy"].normalization(), strict=True
        ):
            np.testing.assert_array_equal(before, after)
        assert client.get_action(episode, OBS) in (0, 1)  # the episode goes on
        client.end_episode(episode, OBS)
        batch = evaluator.sample()
    for column in ("obs", "new_obs", "rewards", "action_logp", "vf_preds"):
        assert np.isfinite(batch[column]).all(), column


# -- JSON the parser cannot take ---------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"[" * 100_000, "nested too deeply"),
        (b'{"reward": ' + b"9" * 5000 + b"}", "4300 digits"),
        (b'{"observation": \xff}', "UTF-8"),
    ],
)
def test_json_the_parser_refuses_is_a_400_not_a_dropped_connection(raw, words):
    with trainer_with() as trainer:
        client = PolicyClient(url_of(trainer))
        episode = client.start_episode()
        for path in ("/episodes", f"/episodes/{episode}/action", "/events"):
            status, answer = post(trainer, path, raw)
            assert status == 400 and answer["field"] == "body", (path, answer)
            assert words in answer["error"], answer
        assert client.get_action(episode, OBS) in (0, 1)


def test_ids_and_unhashable_values_are_400():
    with trainer_with() as trainer:
        status, answer = post(trainer, "/episodes", {"episode_id": "x" * 1000})
        assert status == 400 and answer["field"] == "episode_id" and "256" in answer["error"]
        status, answer = post(trainer, "/episodes", {"episode_id": ["a"]})
        assert status == 400 and answer["field"] == "episode_id"
        status, answer = post(trainer, "/events", {"events": [], "batch_id": {"a": 1}})
        assert status == 400 and answer["field"] == "batch_id"
        status, answer = post(trainer, "/events", {"events": [{"command": ["start"]}]})
        assert status == 200 and answer["results"][0]["status"] == 400


# -- memory: info and episode length -----------------------------------------------------
def test_info_and_episode_steps_past_their_limits_get_413():
    with trainer_with(max_info_bytes=1000, max_episode_steps=5) as trainer:
        evaluator = trainer.evaluators.local_evaluator
        client = PolicyClient(url_of(trainer))
        episode = client.start_episode()
        path = f"/episodes/{episode}"
        status, answer = post(trainer, f"{path}/returns", {"reward": 1, "info": {"a": "x" * 2000}})
        assert status == 413 and "max_info_bytes" in answer["error"], answer
        assert post(trainer, f"{path}/returns", {"reward": 1, "info": {"a": "x" * 600}})[0] == 200
        status, answer = post(trainer, f"{path}/returns", {"reward": 1, "info": {"b": "y" * 600}})
        assert status == 413, answer  # merged over the episode's calls
        assert evaluator.episodes.live[episode].info == {"a": "x" * 600}
        for _ in range(5):
            client.get_action(episode, OBS)
        with pytest.raises(PolicyClientError, match="max_episode_steps") as e:
            client.get_action(episode, OBS)
        assert e.value.status == 413
        status, answer = post(trainer, f"{path}/log_action", {"observation": OBS, "action": 0})
        assert status == 413
        status, answer = post(
            trainer, f"{path}/end", {"observation": OBS, "info": {"c": "z" * 900}}
        )
        assert status == 413  # the end's info counts too; the episode is still open
        client.end_episode(episode, OBS, truncated=True)
        rows = evaluator.episodes.take_finished()
    assert [r.count for r in rows] == [5]


def test_limits_are_checked_settings():
    for key, value in [
        ("max_episode_steps", 0),
        ("max_info_bytes", 0),
        ("request_timeout_s", 0),
        ("max_connections", 0),
        ("max_request_bytes", 10),
    ]:
        with pytest.raises(ConfigError, match=rf"input_external\.{key}"):
            trainer_with(**{key: value})


# -- slow and stalled clients ------------------------------------------------------------
def read_until_closed(sock: socket.socket, limit_s: float) -> bytes:
    """Everything the server sends until it closes the connection (at most ``limit_s``)."""
    sock.settimeout(limit_s)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def trickle(sock: socket.socket, data: bytes, every_s: float, stop: threading.Event) -> None:
    """Send ``data`` one byte every ``every_s`` until it is sent, the server closes, or
    ``stop`` is set."""
    for byte in data:
        if stop.wait(every_s):
            return
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return


def test_trickled_requests_are_cut_at_request_timeout_s_while_others_are_served():
    """A client sending a byte every 0.1 s never trips a per-read timeout; the request's
    deadline cuts it (HTTP 408 for a body) and frees its thread."""
    head = b"POST /episodes HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n"
    with trainer_with(request_timeout_s=1.0) as trainer:
        client = PolicyClient(url_of(trainer))
        stop = threading.Event()
        with (
            socket.create_connection(address(trainer)) as body_sock,
            socket.create_connection(address(trainer)) as head_sock,
        ):
            body_sock.sendall(head)
            tricklers = [
                threading.Thread(target=trickle, args=(body_sock, b"{" * 200, 0.1, stop)),
                threading.Thread(target=trickle, args=(head_sock, head, 0.1, stop)),
            ]
            for t in tricklers:
                t.start()
            try:
                episode = client.start_episode()  # served meanwhile
                for _ in range(10):
                    assert client.get_action(episode, OBS) in (0, 1)
                # 200 bytes at 0.1 s each would take 20 s: the deadline comes first
                answer = read_until_closed(body_sock, limit_s=10)
                head_answer = read_until_closed(head_sock, limit_s=10)
            finally:
                stop.set()
                for t in tricklers:
                    t.join(timeout=5)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"request_timeout_s" in answer
        assert head_answer == b""  # headers never finished: closed without an answer


def wait_tracked(trainer: PPOTrainer, n: int) -> None:
    """Until the server's threads have taken up ``n`` connections (bounded)."""
    connections = trainer.evaluators.local_evaluator.server.httpd.connections
    for _ in range(200):
        if len(connections) == n and all(connections.values()):
            return
        time.sleep(0.02)
    raise AssertionError(f"{len(connections)} connections tracked, expected {n}")


def test_idle_connections_give_way_and_busy_ones_past_max_connections_get_503():
    with trainer_with(max_connections=3, request_timeout_s=10.0) as trainer:
        client = PolicyClient(url_of(trainer), timeout_s=10)
        idle = [socket.create_connection(address(trainer)) for _ in range(3)]
        busy: list[socket.socket] = []
        try:
            wait_tracked(trainer, 3)
            episode = client.start_episode()  # the idlest connection makes room
            assert read_until_closed(idle[0], limit_s=5) == b""  # it was closed
            wait_tracked(trainer, 3)
            for _ in range(3):  # requests under way, not idle: never closed for others
                sock = socket.create_connection(address(trainer))
                sock.sendall(b"POST /episodes HTTP/1.1\r\n")
                busy.append(sock)
                time.sleep(0.1)
            wait_tracked(trainer, 3)
            with socket.create_connection(address(trainer)) as extra:
                answer = read_until_closed(extra, limit_s=5)
            assert answer.startswith(b"HTTP/1.1 503") and b"max_connections" in answer
        finally:
            for sock in idle + busy:
                sock.close()
        # served again once the server has seen them leave (slower on a loaded machine)
        connections = trainer.evaluators.local_evaluator.server.httpd.connections
        deadline = time.monotonic() + 10
        while len(connections) >= 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.get_action(episode, OBS) in (0, 1)


# -- tokens and clients ------------------------------------------------------------------
def test_with_a_token_episodes_answer_only_the_client_that_started_them():
    token = {"Authorization": "Bearer s3cret"}
    with trainer_with(auth_token="s3cret") as trainer:
        url = url_of(trainer)
        owner = PolicyClient(url, auth_token="s3cret")
        other = PolicyClient(url, auth_token="s3cret")
        episode = owner.start_episode("my-episode")
        assert owner.get_action(episode, OBS) in (0, 1)
        for call in (
            lambda: other.get_action(episode, OBS),
            lambda: other.log_action(episode, OBS, 0),
            lambda: other.log_returns(episode, 1.0, info={"x": 1}),
            lambda: other.end_episode(episode, OBS),
        ):
            with pytest.raises(PolicyClientError, match="unknown episode 'my-episode'") as e:
                call()
            assert e.value.status == 404
        events = {"events": [{"command": "returns", "episode_id": episode, "reward": 5.0}]}
        status, answer = post(trainer, "/events", events, {**token, "X-Hierl-Client": "guess"})
        assert status == 200 and answer["results"][0]["status"] == 404
        status, answer = post(trainer, f"/episodes/{episode}/returns", {"reward": 5.0}, token)
        assert status == 404  # no client id at all
        live = trainer.evaluators.local_evaluator.episodes.live[episode]
        assert live.pending_reward == 0.0 and len(live.actions) == 1
        # the same client id in another PolicyClient is the same client
        again = PolicyClient(url, auth_token="s3cret", client_id=owner.client_id)
        assert again.get_action(episode, OBS) in (0, 1)
        owner.end_episode(episode, OBS)
        # an unauthenticated client learns nothing of the routes
        for method, path in [("POST", "/nowhere"), ("GET", "/nowhere"), ("GET", "/spec")]:
            assert request(trainer, method, path)[0] == 401, (method, path)


def test_without_a_token_any_client_may_continue_an_episode():
    with trainer_with() as trainer:
        url = url_of(trainer)
        episode = PolicyClient(url).start_episode()
        assert PolicyClient(url).get_action(episode, OBS) in (0, 1)


def test_box_actions_beyond_float32_are_refused():
    config = {**SMALL, "env": "Pendulum-v1"}
    with PPOTrainer(config) as trainer:
        evaluator = trainer.evaluators.local_evaluator
        episode = PolicyClient(url_of(trainer)).start_episode()
        path = f"/episodes/{episode}/log_action"
        status, answer = post(trainer, path, {"observation": [1.0, 0.0, 0.0], "action": [1e300]})
        assert status == 400 and answer["field"] == "action" and "float32" in answer["error"]
        assert post(trainer, path, {"observation": [1.0, 0.0, 0.0], "action": [0.5]})[0] == 200
        assert len(evaluator.episodes.live[episode].actions) == 1


def test_huge_headers_and_lying_content_lengths_are_answered_or_closed():
    with trainer_with(request_timeout_s=2.0) as trainer:
        many = b"".join(b"X-H%d: v\r\n" % i for i in range(200))
        long_line = b"X-Long: " + b"a" * 70_000 + b"\r\n"
        for headers, status in [(many, b"431"), (long_line, b"431")]:
            with socket.create_connection(address(trainer)) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
                answer = read_until_closed(sock, limit_s=10)
            assert answer.split(b" ", 2)[1] == status, answer[:100]
            assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
        # a Content-Length larger than the body, then the client closes its side
        with socket.create_connection(address(trainer)) as sock:
            sock.sendall(b"POST /episodes HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{}")
            sock.shutdown(socket.SHUT_WR)
            assert read_until_closed(sock, limit_s=10) == b""  # nothing recorded, closed
        # a Content-Length smaller than the body: the rest is a malformed next request
        with socket.create_connection(address(trainer)) as sock:
            sock.sendall(
                b"POST /episodes HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}junk\r\n\r\n"
            )
            answer = read_until_closed(sock, limit_s=10)
        assert answer.startswith(b"HTTP/1.1 200") and b"HTTP/1.1 400 " in answer
        assert b"Bad request syntax" in answer
        assert len(trainer.evaluators.local_evaluator.episodes.live) == 1
        assert request(trainer, "GET", "/healthz")[0] == 200
