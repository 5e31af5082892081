"""External environments: apps that own their loop drive training through a PolicyClient
(``input: "external"``, hierl.evaluators.external; hierl.serve.client)."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from hierl.algorithms.ppo import PPOTrainer
from hierl.config import ConfigError
from hierl.evaluators.external import ExternalInputTimeout
from hierl.sample_batch import SampleBatch
from hierl.serve.client import PolicyClient, PolicyClientError
from tests.support.helpers import EXTERNAL_PPO, free_port
from tests.support.learning_runs import SEED, train_until

CLIENT_SCRIPT = Path(__file__).parent / "support" / "external_cartpole_client.py"
SMALL = EXTERNAL_PPO


def url_of(trainer: PPOTrainer) -> str:
    host, port = trainer.evaluators.local_evaluator.address
    return f"http://{host}:{port}"


def post(url: str, path: str, body: bytes | dict, headers: dict | None = None) -> tuple:
    """A raw request: ``(status, decoded JSON answer)``."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, body=data, headers=headers or {})
    response = conn.getresponse()
    out = response.status, json.loads(response.read())
    conn.close()
    return out


def play_episode(client: PolicyClient, env: gym.Env, seed: int | None = None) -> int:
    """One whole CartPole episode through ``client``; returns its length."""
    episode = client.start_episode()
    obs, _ = env.reset(seed=seed)
    steps = 0
    while True:
        obs, reward, terminated, truncated, _ = env.step(client.get_action(episode, obs))
        client.log_returns(episode, reward)
        steps += 1
        if terminated or truncated:
            client.end_episode(episode, obs, truncated=truncated and not terminated)
            return steps


# -- the client ------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_client_import_loads_neither_ray_nor_torch():
    code = (
        "import sys; import hierl.serve.client, hierl.auth; "
        "from hierl.serve import PolicyClient; "
        "print(sorted({'ray', 'torch', 'numpy'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.timeout(30)
def test_unreachable_server_is_a_clear_error():
    port = free_port()  # nobody listens on it
    client = PolicyClient(f"http://127.0.0.1:{port}", timeout_s=5)
    with pytest.raises(PolicyClientError, match="cannot reach the policy server") as e:
        client.start_episode()
    assert e.value.status is None


# -- rows, postprocessing, metrics -------------------------------------------------------
@pytest.mark.timeout(60)
def test_batch_equals_the_policys_postprocessing_of_the_same_steps():
    rng = np.random.default_rng(0)
    with PPOTrainer(SMALL) as trainer:
        evaluator = trainer.evaluators.local_evaluator
        policy = evaluator.policy
        client = PolicyClient(url_of(trainer))
        # episode 1: the policy acts, terminated after 6 steps; episode 2: the app acts
        # (log_action), truncated after 15 steps
        obs1 = rng.normal(size=(7, 4)).astype(np.float32)
        first = client.start_episode()
        actions1 = []
        for t in range(6):
            actions1.append(client.get_action(first, obs1[t]))
            client.log_returns(first, 1.0 + t)
        client.end_episode(first, obs1[6])
        obs2 = rng.normal(size=(16, 4)).astype(np.float32)
        actions2 = rng.integers(0, 2, size=15)
        second = client.start_episode()
        for t in range(15):
            client.log_action(second, obs2[t], int(actions2[t]))
            client.log_returns(second, 0.5)
            client.log_returns(second, 0.25)  # two rewards in one step add up
        client.end_episode(second, obs2[15], truncated=True)
        batch = evaluator.sample()
        records = evaluator.get_metrics()
        sampled = evaluator.sample_env()  # the env sampler's rows, for the columns

    expected = []
    for obs, actions, rewards, terminated in [
        (obs1, np.asarray(actions1), np.arange(1.0, 7.0), True),
        (obs2, actions2, np.full(15, 0.75), False),
    ]:
        n = len(actions)
        rows = SampleBatch(
            {
                SampleBatch.OBS: obs[:-1],
                SampleBatch.NEW_OBS: obs[1:],
                SampleBatch.ACTIONS: actions.astype(np.int64),
                SampleBatch.REWARDS: rewards.astype(np.float32),
                SampleBatch.TERMINATEDS: np.arange(n) == n - 1 if terminated else np.zeros(n, bool),
                SampleBatch.TRUNCATEDS: np.zeros(n, bool) if terminated else np.arange(n) == n - 1,
                SampleBatch.T: np.arange(n),
            }
        )
        dist_inputs, values = policy.model(torch.as_tensor(obs[:-1]))
        rows[SampleBatch.ACTION_LOGP] = policy.compute_log_likelihoods(rows).astype(np.float32)
        rows[SampleBatch.VF_PREDS] = values.detach().numpy()
        rows[SampleBatch.ACTION_DIST_INPUTS] = dist_inputs.detach().numpy()
        expected.append(rows)
    episodes = batch.split_by_episode()
    assert [e.count for e in episodes] == [6, 15]
    assert set(batch) == set(sampled), "the sampler's columns, no more, no fewer"
    for rows, got in zip(expected, episodes, strict=True):
        rows[SampleBatch.EPS_ID] = got[SampleBatch.EPS_ID]
        want = policy.postprocess_trajectory(rows)
        assert set(got) == set(want)
        for key in want:
            assert got[key].dtype == sampled[key].dtype, key
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)
    assert sorted((r.episode_reward, r.episode_length) for r in records) == [(11.25, 15), (21, 6)]


@pytest.mark.timeout(60)
def test_vanished_client_leaves_no_half_episode_and_others_go_on():
    config = {**SMALL, "input_external": {"port": 0, "episode_timeout_s": 0.5}}
    with PPOTrainer(config) as trainer:
        evaluator = trainer.evaluators.local_evaluator
        url = url_of(trainer)
        env = gym.make("CartPole-v1")
        ghost_client = PolicyClient(url)
        ghost = ghost_client.start_episode()
        obs, _ = env.reset(seed=1)
        for _ in range(5):  # five steps, then the app vanishes mid-episode
            obs, reward, *_ = env.step(ghost_client.get_action(ghost, obs))
            ghost_client.log_returns(ghost, reward)
        ghost_eps = evaluator.episodes.live[ghost].eps_id
        ghost_client.close()
        other = PolicyClient(url)
        played = 0
        while played < 40:
            played += play_episode(other, env, seed=played)
        time.sleep(0.7)  # past episode_timeout_s
        batches = [evaluator.sample()]
        played = 0
        while played < 20:  # the server keeps serving the others
            played += play_episode(other, env)
        batches.append(evaluator.sample())
        records = evaluator.get_metrics()
        with pytest.raises(PolicyClientError, match="unknown episode") as e:
            ghost_client.get_action(ghost, obs)
        assert e.value.status == 404
    eps_ids = np.concatenate([b[SampleBatch.EPS_ID] for b in batches])
    assert ghost_eps not in eps_ids
    assert evaluator.episodes.dropped == 1
    assert sum(b.count for b in batches) >= 60
    assert all(r.episode_length > 0 for r in records) and len(records) == len(set(eps_ids))


# -- bad input, security, timeouts -------------------------------------------------------
@pytest.mark.timeout(60)
def test_bad_input_answers_400_naming_the_field_and_shape():
    with PPOTrainer(SMALL) as trainer:
        url = url_of(trainer)
        assert trainer.evaluators.local_evaluator.address[0] == "127.0.0.1"  # localhost
        client = PolicyClient(url)
        episode = client.start_episode()
        path = f"/episodes/{episode}/action"
        status, answer = post(url, path, {"observation": [0.1, 0.2, 0.3]})
        assert status == 400 and answer["field"] == "observation"
        assert "[3]" in answer["error"] and "[4]" in answer["error"]
        status, answer = post(url, path, {"observation": ["a", "b", "c", "d"]})
        assert status == 400 and answer["field"] == "observation"
        status, answer = post(url, path, b'{"observation": [NaN, 0, 0, 0]}')
        assert status == 400 and "NaN" in answer["error"]
        status, answer = post(url, path, b"{not json")
        assert status == 400 and answer["field"] == "body"
        status, answer = post(url, path, {"observation": [0, 0, 0, 0], "reward": "x"})
        assert status == 400 and answer["field"] == "reward"
        status, answer = post(
            url, f"/episodes/{episode}/log_action", {"observation": [0, 0, 0, 0], "action": 5}
        )
        assert status == 400 and answer["field"] == "action" and "Discrete(2)" in answer["error"]
        status, answer = post(url, "/episodes/no-such-episode/action", {"observation": [0] * 4})
        assert status == 404 and "unknown episode 'no-such-episode'" in answer["error"]
        status, answer = post(url, "/nowhere", {})
        assert status == 404
        with pytest.raises(PolicyClientError, match=r"HTTP 400: observation: .*expected \[4\]"):
            client.get_action(episode, [1.0, 2.0])
        # the episode is unharmed by the refused calls
        assert client.get_action(episode, [0.0, 0.0, 0.0, 0.0]) in (0, 1)


@pytest.mark.timeout(60)
def test_auth_token_required_when_set():
    config = {**SMALL, "input_external": {"port": 0, "auth_token": "s3cret"}}
    with PPOTrainer(config) as trainer:
        url = url_of(trainer)
        with pytest.raises(PolicyClientError, match="HTTP 401: missing token") as e:
            PolicyClient(url).start_episode()
        assert e.value.status == 401
        with pytest.raises(PolicyClientError, match="HTTP 401: wrong token"):
            PolicyClient(url, auth_token="guess").start_episode()
        client = PolicyClient(url, auth_token="s3cret")
        assert client.get_action(client.start_episode(), [0.0] * 4) in (0, 1)
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", "/healthz")  # health checks need no token
        assert conn.getresponse().status == 200


@pytest.mark.timeout(60)
def test_no_clients_times_out_with_a_clear_error():
    trainer = PPOTrainer({**SMALL, "sample_timeout_s": 0.5})
    with trainer, pytest.raises(ExternalInputTimeout, match="no client ended an episode"):
        trainer.train()


@pytest.mark.timeout(60)
def test_config_errors():
    with pytest.raises(ConfigError, match="mixes 'external'"):
        PPOTrainer({"env": "CartPole-v1", "input_mix": {"external": 0.5, "sampler": 0.5}})
    with pytest.raises(ConfigError, match=r"input_external\.port"):
        PPOTrainer({"env": "CartPole-v1", "input": "external", "input_external": {"port": -1}})
    with pytest.raises(ConfigError, match=r"unknown config key 'input_external\.prot'"):
        PPOTrainer({"env": "CartPole-v1", "input": "external", "input_external": {"prot": 1}})


@pytest.mark.timeout(120)
def test_remote_evaluator_listens_on_port_plus_its_index(ray_session):
    free = free_port()
    config = {
        **SMALL,
        "num_evaluators": 1,
        "num_cpus_per_evaluator": 0.5,
        "input_external": {"port": free - 1},
    }
    with PPOTrainer(config) as trainer:
        assert trainer.evaluators.local_evaluator.address is None  # it does not sample
        client = PolicyClient(f"http://127.0.0.1:{free}")
        stop = threading.Event()

        def play() -> None:
            env = gym.make("CartPole-v1")
            while not stop.is_set():
                play_episode(client, env)

        thread = threading.Thread(target=play, daemon=True)
        thread.start()
        try:
            result = trainer.train()
        finally:
            stop.set()
        assert result["episodes_this_iter"] > 0 and result["timesteps_total"] >= 40
        thread.join(timeout=30)


# -- learning ----------------------------------------------------------------------------
@pytest.mark.learning
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["remote", "local"])
def test_ppo_learns_cartpole_from_a_client_process(mode):
    config = {
        "env": "CartPole-v1",
        "input": "external",
        "input_external": {"port": 0},
        "seed": SEED,
        "metrics_smoothing_episodes": 20,
    }
    with PPOTrainer(config) as trainer:
        app = subprocess.Popen(
            [sys.executable, str(CLIENT_SCRIPT), url_of(trainer), mode, "2", str(SEED)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            run = train_until(trainer, 450, 150_000, ready=lambda r: r["episodes_total"] >= 20)
        finally:
            trainer.stop()  # the server goes away: the app's clients end
            try:
                output, _ = app.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                app.kill()
                output, _ = app.communicate(timeout=10)
    assert run.reached, run
    # remote inference: the app imported neither Ray nor torch (exit code 3 otherwise)
    assert app.returncode == 0, output


# -- review fixes ------------------------------------------------------------------------
def local_client(trainer: PPOTrainer) -> PolicyClient:
    """A local-inference client that keeps the policy it fetched first."""
    return PolicyClient(url_of(trainer), inference_mode="local", update_interval_s=1e9)


def raw_exchange(url: str, data: bytes, wait_s: float = 10.0) -> tuple[bytes, bool]:
    """Send ``data`` on a new connection; ``(everything answered, closed by the server)``
    (False: still open after ``wait_s``)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            return out, False
    return out, True


@pytest.mark.timeout(120)
def test_remote_evaluator_returns_a_partial_batch_before_the_driver_gives_up(ray_session):
    free = free_port()
    config = {
        **SMALL,
        "num_evaluators": 1,
        "num_cpus_per_evaluator": 0.5,
        "input_external": {"port": free - 1},
        "rollout_fragment_length": 10_000,  # never reached: sample() waits its timeout
        "train_batch_size": 20,
        "sample_timeout_s": 24,  # the actor must start within it too
    }
    with PPOTrainer(config) as trainer:
        client = PolicyClient(f"http://127.0.0.1:{free}")
        env = gym.make("CartPole-v1")
        played = 0
        while played < 20:
            played += play_episode(client, env, seed=played)
        # the driver waits sample_timeout_s for the remote sample(), which must answer
        # with the ended episodes before that (a GetTimeoutError before the fix)
        result = trainer.train()
    assert result["timesteps_total"] == played
    assert result["episodes_this_iter"] > 0


@pytest.mark.timeout(60)
def test_events_apply_every_call_and_answer_each():
    with PPOTrainer(SMALL) as trainer:
        evaluator = trainer.evaluators.local_evaluator
        url = url_of(trainer)
        events = [
            {"command": "start", "episode_id": "a"},
            {"command": "log_action", "episode_id": "gone", "observation": [0] * 4, "action": 0},
            {"command": "log_action", "episode_id": "a", "observation": [0] * 3, "action": 0},
            {"command": "start", "episode_id": "b"},
            {"command": "log_action", "episode_id": "b", "observation": [0] * 4, "action": 1},
        ]
        status, answer = post(url, "/events", {"events": events})
        assert status == 200 and answer["failed"] == [1, 2]
        assert (
            answer["results"][1]["status"] == 404
            and "unknown episode" in (answer["results"][1]["error"])
        )
        assert answer["results"][2]["status"] == 400
        assert answer["results"][2]["field"] == "observation"
        assert answer["results"][3] == {"episode_id": "b"}
        assert set(evaluator.episodes.live) == {"a", "b"}  # the calls after the failures
        assert evaluator.episodes.live["b"].open and not evaluator.episodes.live["a"].open


@pytest.mark.timeout(60)
def test_client_resends_a_batch_whose_answer_was_lost_and_it_is_applied_once(monkeypatch):
    with PPOTrainer(SMALL) as trainer:
        evaluator = trainer.evaluators.local_evaluator
        client = local_client(trainer)
        real = client._request
        lost = []

        def answer_lost(method, path, data, raw=False):  # applied, but the answer is lost
            out = real(method, path, data, raw)
            if path == "/events" and not lost:
                lost.append(data)
                raise PolicyClientError("no answer within 60 s")
            return out

        monkeypatch.setattr(client, "_request", answer_lost)
        episode = client.start_episode()
        for _ in range(3):
            client.get_action(episode, [0.0] * 4)
        with pytest.raises(PolicyClientError):
            client.flush()
        client.get_action(episode, [0.1] * 4)
        assert client.flush() == []  # the kept batch, then the new step
        assert len(evaluator.episodes.live[episode].actions) == 4, "each step once"
        client.end_episode(episode, [0.0] * 4)
        assert evaluator.episodes.finished_rows == 4


@pytest.mark.timeout(60)
def test_client_flushes_by_bytes_and_reports_refused_calls(monkeypatch, caplog):
    import hierl.serve.client as client_module

    monkeypatch.setattr(client_module, "MAX_FLUSH_BYTES", 1000)
    with PPOTrainer(SMALL) as trainer:
        evaluator = trainer.evaluators.local_evaluator
        client = local_client(trainer)
        sizes = []
        real = client._request

        def record(method, path, data, raw=False):
            if path == "/events":
                sizes.append(len(data))
            return real(method, path, data, raw)

        monkeypatch.setattr(client, "_request", record)
        episode = client.start_episode()
        for t in range(30):  # ~200 bytes a step, far below MAX_BUFFERED_EVENTS steps
            client.get_action(episode, [0.123456789 * t] * 4)
        assert sizes and max(sizes) <= 1000 + 100, sizes
        assert len(evaluator.episodes.live[episode].actions) >= 30 - 1000 // 150
        evaluator.episodes.drop_idle(time.monotonic() + 3600)  # the server drops it
        client.get_action(episode, [0.0] * 4)
        with caplog.at_level("WARNING", logger="hierl.serve.client"):
            refused = client.flush()
        assert [r["status"] for r in refused] == [404] * len(refused) and refused
        assert "refused" in caplog.text


@pytest.mark.timeout(60)
def test_local_inference_rows_carry_the_clients_behaviour_logp():
    rng = np.random.default_rng(0)
    with PPOTrainer(SMALL) as trainer:
        evaluator = trainer.evaluators.local_evaluator
        client = local_client(trainer)  # fetched the policy now
        behaviour = type(evaluator.policy)(
            evaluator.policy.observation_space,
            evaluator.policy.action_space,
            evaluator.policy.config,
        )
        behaviour.set_weights(evaluator.policy.get_weights())
        newer = {
            k: v + rng.normal(0, 0.5, v.shape).astype(v.dtype)
            for k, v in evaluator.policy.get_weights().items()
        }
        evaluator.set_weights(
            {"default_policy": newer}
        )  # the server's policy moves on; the client's is stale
        env = gym.make("CartPole-v1")
        played = 0
        while played < 20:
            played += play_episode(client, env, seed=played)
        batch = evaluator.sample()
    rows = SampleBatch({k: batch[k] for k in (SampleBatch.OBS, SampleBatch.ACTIONS)})
    want = behaviour.compute_log_likelihoods(rows)
    current = evaluator.policy.compute_log_likelihoods(rows)
    assert not np.allclose(current, want, atol=1e-3), "the server's policy did move on"
    np.testing.assert_allclose(batch[SampleBatch.ACTION_LOGP], want, rtol=1e-5, atol=1e-5)
    dist_inputs, _ = behaviour.model(torch.as_tensor(batch[SampleBatch.OBS]))
    np.testing.assert_allclose(
        batch[SampleBatch.ACTION_DIST_INPUTS], dist_inputs.detach().numpy(), rtol=1e-5, atol=1e-5
    )
    _, server_values = evaluator.policy.model(torch.as_tensor(batch[SampleBatch.OBS]))
    np.testing.assert_allclose(  # vf_preds: the server's value function (GAE's baseline)
        batch[SampleBatch.VF_PREDS], server_values.detach().numpy(), rtol=1e-5, atol=1e-5
    )


@pytest.mark.timeout(60)
def test_request_taken_into_another_batch_is_answered_not_refused(monkeypatch):
    config = {**SMALL, "input_external": {"port": 0, "episode_timeout_s": 0.5}}
    with PPOTrainer(config) as trainer:
        evaluator = trainer.evaluators.local_evaluator
        ids = [evaluator.handle("start", None, {})["episode_id"] for _ in range(2)]
        real_act = evaluator.episodes.act

        def slow_act(requests):  # longer than the waiters' episode_timeout_s
            time.sleep(1.5)
            real_act(requests)

        monkeypatch.setattr(evaluator.episodes, "act", slow_act)
        answers, errors = {}, []

        def call(episode_id):
            try:
                answers[episode_id] = evaluator.handle(
                    "action", episode_id, {"observation": [0.0] * 4}
                )
            except Exception as e:
                errors.append(e)

        evaluator._lock.acquire()  # learning: both requests queue up
        threads = [threading.Thread(target=call, args=(i,)) for i in ids]
        for t in threads:
            t.start()
        while len(evaluator._pending) < 2:
            time.sleep(0.01)
        evaluator._lock.release()  # one takes both; the other times out waiting
        for t in threads:
            t.join(timeout=10)
        assert errors == [] and set(answers) == set(ids)
        assert [len(evaluator.episodes.live[i].actions) for i in ids] == [1, 1]


@pytest.mark.timeout(60)
def test_idle_connections_are_closed_and_411_closes_its_connection():
    config = {**SMALL, "input_external": {"port": 0, "episode_timeout_s": 0.5}}
    with PPOTrainer(config) as trainer:
        url = url_of(trainer)
        out, closed = raw_exchange(url, b"")  # connects, never sends a request
        assert closed and out == b""  # closed by the server within raw_exchange's 10 s
        request = b"POST /events HTTP/1.1\r\nHost: x\r\n\r\nGET /spec HTTP/1.1\r\nHost: x\r\n\r\n"
        out, closed = raw_exchange(url, request)
        assert closed and out.startswith(b"HTTP/1.1 411") and out.count(b"HTTP/1.1 ") == 1


@pytest.mark.timeout(60)
def test_spec_is_standard_json_with_infinite_bounds_as_null():
    from hierl.evaluators.wire import encode

    assert encode(np.array([1.0, np.inf, -np.inf, np.nan])) == [1.0, None, None, None]
    assert encode({"a": (np.float32(np.nan), 2)}) == {"a": [None, 2]}

    def no_constants(name):
        raise ValueError(f"not standard JSON: {name}")

    with PPOTrainer(SMALL) as trainer:
        host, port = trainer.evaluators.local_evaluator.address
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/spec")
        spec = json.loads(conn.getresponse().read(), parse_constant=no_constants)
    high = spec["observation_space"]["high"]  # CartPole: unbounded velocities
    assert high[1] is None and high[0] == pytest.approx(4.8)


@pytest.mark.timeout(60)
def test_policy_version_is_the_array_digest_of_weights_and_filter():
    from hierl.utils import array_digest

    with PPOTrainer({**SMALL, "observation_filter": "MeanStdFilter"}) as trainer:
        evaluator = trainer.evaluators.local_evaluator
        mean, scale, clip = evaluator.filters["default_policy"].normalization()
        tree = {
            "weights": evaluator.acting.get_weights(),
            "filter": {"mean": mean, "scale": scale, "clip": clip},
        }
        assert evaluator.policy_version() == array_digest(tree)[:16]


def test_token_variable_declared_once_and_checked_in_constant_time():
    import inspect

    import hierl.auth
    import hierl.evaluators.external.settings
    import hierl.serve.client
    import hierl.serve.options

    for module in (hierl.evaluators.external.settings, hierl.serve.options, hierl.serve.client):
        assert '"HIERL_SERVE_TOKEN"' not in inspect.getsource(module), module.__name__
        assert module.TOKEN_ENV == hierl.auth.TOKEN_ENV
    assert hierl.auth.bearer_matches("Bearer s3cret", "s3cret")
    assert hierl.auth.bearer_matches("bearer s3cret", "s3cret")
    assert not hierl.auth.bearer_matches("Bearer guess", "s3cret")
    assert not hierl.auth.bearer_matches("s3cret", "s3cret")


@pytest.mark.timeout(30)
def test_public_address_without_a_token_logs_a_warning(monkeypatch, caplog):
    from hierl.evaluators.external.server import ExternalServer

    monkeypatch.delenv("HIERL_SERVE_TOKEN", raising=False)
    for host, token, warned in [
        ("0.0.0.0", None, True),
        ("0.0.0.0", "t", False),
        ("127.0.0.1", None, False),
    ]:
        caplog.clear()
        with caplog.at_level("WARNING", logger="hierl.evaluators.external.server"):
            ExternalServer(app=None, host=host, port=0, token=token).close()
        assert ("without an auth token" in caplog.text) == warned, (host, token)


class _SlowSpec:
    """An app whose ``GET /spec`` takes ``seconds`` (a call in progress at close)."""

    def __init__(self, seconds: float):
        self.seconds, self.entered, self.finished = seconds, threading.Event(), False

    def describe(self) -> dict:
        self.entered.set()
        time.sleep(self.seconds)
        self.finished = True
        return {}


@pytest.mark.timeout(30)
def test_close_waits_for_the_calls_in_progress():
    # A connection thread still inside torch at interpreter exit aborts the process
    # ("terminate called without an active exception"): close() must outwait them.
    from hierl.evaluators.external.server import ExternalServer

    app = _SlowSpec(0.5)
    server = ExternalServer(app=app, port=0)
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=10)
    caller = threading.Thread(target=lambda: conn.request("GET", "/spec"), daemon=True)
    caller.start()
    assert app.entered.wait(10)
    server.close()
    assert app.finished
    assert not server.httpd.threads
    conn.close()
