"""hierl serve: a checkpoint's policy behind Ray Serve's HTTP endpoint.

Serve runs inside the test session's Ray (2 CPUs; replicas reserve 0.25 CPU each) on a
free localhost port and is shut down at the end of the module.  Every HTTP call has a
timeout.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.client import HTTPConnection

import gymnasium as gym
import numpy as np
import psutil
import pytest

from hierl.algorithms.ppo import PPOTrainer
from hierl.algorithms.serving import PolicySnapshot
from hierl.checkpoint import CheckpointError
from hierl.cli import main
from hierl.config import ConfigError
from hierl.evaluators.wire import MAX_BATCH, WireError, space_to_json
from hierl.serve import ServeOptions, deploy
from hierl.serve.policy import ServedPolicy
from tests.support.helpers import free_port, sigint_as_from_a_terminal
from tests.support.learning_configs import PPO_CARTPOLE
from tests.support.learning_runs import SEED, train_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(120)]

TOKEN = "s3cret-token"
REPLICA = {"num_cpus_per_replica": 0.25}
SMALL_PPO = {
    "env": "CartPole-v1",
    "train_batch_size": 256,
    "sgd_minibatch_size": 64,
    "num_sgd_iter": 2,
    "model": {"hiddens": (32, 32)},
}


def http(url: str, body=None, *, token: str | None = None, raw: bytes | None = None):
    """``(status, JSON answer)`` of a GET (no body) or POST."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def random_obs(n: int, seed: int) -> np.ndarray:
    """CartPole-like observations, wider than the episodes' (both actions occur)."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, 4)) * [1.0, 1.5, 0.15, 1.5]).astype(np.float32)


@pytest.fixture(scope="module")
def port(ray_session):
    from ray import serve

    yield free_port()
    serve.shutdown()


@pytest.fixture(scope="module")
def ppo(tmp_path_factory):
    """A briefly trained CartPole PPO trainer and its checkpoint."""
    trainer = PPOTrainer({**SMALL_PPO, "seed": 0})
    trainer.train()
    path = trainer.save(tmp_path_factory.mktemp("serve") / "ppo")
    yield trainer, path
    trainer.stop()


@pytest.fixture(scope="module")
def app(ppo, port):
    """The PPO checkpoint served with a token, 64 observations and 64 KiB per request."""
    served = deploy(
        ppo[1],
        port=port,
        name="ppo",
        auth_token=TOKEN,
        max_observations=64,
        max_request_bytes=64 * 1024,
        **REPLICA,
    )
    yield served
    served.delete()


def act(app, body, token=TOKEN):
    return http(app.url + "/act", body, token=token)


# -- answers ------------------------------------------------------------------------------
def test_answers_equal_compute_single_action_for_1000_observations(app, ppo):
    trainer, _ = ppo
    obs = random_obs(1000, seed=1)
    served = []
    for rows in np.split(obs, 20):
        status, answer = act(app, {"observations": rows.tolist()})
        assert status == 200, answer
        served.extend(answer["actions"])
    expected = [int(trainer.compute_single_action(o, explore=False)) for o in obs]
    assert served == expected
    assert 0 < sum(expected) < len(expected)  # both actions occur: the check can fail
    status, one = act(app, {"observation": obs[0].tolist()})
    assert status == 200 and one["action"] == expected[0]


def test_extras_and_versions_are_the_policy_s(app, ppo):
    trainer, _ = ppo
    obs = random_obs(8, seed=2)
    status, answer = act(app, {"observations": obs.tolist(), "extras": ["value", "action_logp"]})
    assert status == 200, answer
    policy = trainer.get_policy()
    actions, _, extra = policy.compute_actions(obs, explore=False)
    np.testing.assert_allclose(answer["value"], extra["vf_preds"], atol=1e-5)
    np.testing.assert_allclose(answer["action_logp"], extra["action_logp"], atol=1e-5)
    assert answer["actions"] == actions.tolist()
    assert answer["version"] == PolicySnapshot.of(trainer).version
    status, sampled = act(app, {"observations": obs.tolist(), "explore": True})
    assert status == 200 and set(sampled["actions"]) <= {0, 1}


def test_spec_names_spaces_algorithm_iteration_and_hash(app, ppo):
    trainer, path = ppo
    status, spec = http(app.url + "/spec", token=TOKEN)
    assert status == 200, spec
    env = gym.make("CartPole-v1")
    # JSON has no infinity: an unbounded side reads as null
    box = space_to_json(env.observation_space)
    for side in ("low", "high"):
        box[side] = [v if np.isfinite(v) else None for v in box[side]]
    assert spec["observation_space"] == box
    assert spec["action_space"] == {"type": "Discrete", "n": 2, "start": 0}
    assert spec["algorithm"] == "PPO"
    assert spec["iteration"] == trainer.iteration == 1
    assert spec["hash"] == PolicySnapshot.of(trainer).version["hash"]
    assert spec["checkpoint"] == path.name  # its name: the path is the server's business
    assert str(path.parent) not in json.dumps(spec)
    assert spec["policies"]["default_policy"]["extras"] == [
        "action_dist_inputs",
        "action_logp",
        "value",
    ]
    status, health = http(app.url + "/healthz")  # no token needed
    assert status == 200 and health["status"] == "ok"


# -- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        (b'{"observations": [[0, 0, 0, 0]', "body", ["malformed JSON"]),
        (b"[1, 2]", "body", ["JSON object"]),
        (b'{"observations": [[1, 2]]}', "observations", ["[2]", "expected [4]"]),
        (b'{"observations": [1, 2, 3, 4]}', "observations", ["expected [4]"]),
        (b'{"observations": [["a", "b", "c", "d"]]}', "observations", ["shape [4]", "numbers"]),
        (b'{"observations": [[0, NaN, 0, 0]]}', "observations", ["NaN"]),
        (b'{"observation": [0, 0, Infinity, 0]}', "observation", ["infinite"]),
        (json.dumps({"observations": [[0.0] * 4] * 65}).encode(), "observations", ["at most 64"]),
        (b'{"observations": []}', "observations", ["shape [4]"]),
        (b'{"obs": [[0, 0, 0, 0]]}', "obs", ["unknown field", "observations"]),
        (b'{"observation": [0, 0, 0, 0], "explore": "yes"}', "explore", ["true or false"]),
        (b'{"observation": [0, 0, 0, 0], "extras": ["q"]}', "extras", ["'q'", "value"]),
        (b'{"observation": [0, 0, 0, 0], "state": [[0]]}', "state", ["feed-forward"]),
        (b'{"observation": [0, 0, 0, 0], "policy_id": "p2"}', "policy_id", ["default_policy"]),
        # finite in JSON, not in the float32 the policy takes
        (b'{"observations": [[0, 0, 1e300, 0]]}', "observations", ["1e+300", "float32"]),
        (b'{"observation": [0, -3.5e38, 0, 0]}', "observation", ["float32"]),
        (b'{"observation": [0, 1' + b"0" * 400 + b", 0, 0]}", "observation", ["too large"]),
        # what the parser refuses, and values that cannot be looked up
        (b"[" * 60_000, "body", ["nested too deeply"]),  # under max_request_bytes
        (b'{"observation": [' + b"9" * 5000 + b", 0, 0, 0]}", "body", ["4300 digits"]),
        (b'{"observation": [0, 0, 0, 0], "policy_id": ["p"]}', "policy_id", ["['p']"]),
        (b'{"observation": [0, 0, 0, 0], "policy_id": {"a": 1}}', "policy_id", ["valid"]),
        (
            b'{"observation": [0, 0, 0, 0], "explore": ' + b"[" * 500 + b"]" * 500 + b"}",
            "explore",
            ["true or false"],
        ),
    ],
)
def test_bad_requests_get_400_naming_the_field(app, raw, field, words):
    status, answer = http(app.url + "/act", raw=raw, token=TOKEN)
    assert status == 400, answer
    assert answer["field"] == field
    for word in words:
        assert word in answer["error"]


def test_oversized_body_is_refused_before_it_is_read(app):
    body = json.dumps({"observations": [[0.123456789] * 4] * 2000}).encode()
    assert len(body) > 64 * 1024
    status, answer = http(app.url + "/act", raw=body, token=TOKEN)
    assert status == 413 and answer["field"] == "body" and "65536" in answer["error"]


def test_chunked_body_over_the_limit_is_refused(app):
    """No Content-Length: the replica counts the bytes as they arrive."""
    body = json.dumps({"observations": [[0.123456789] * 4] * 2000}).encode()
    assert len(body) > 64 * 1024
    conn = HTTPConnection(app.url.removeprefix("http://"), timeout=30)
    try:
        conn.putrequest("POST", "/act")
        conn.putheader("Authorization", f"Bearer {TOKEN}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        for start in range(0, len(body), 8192):
            chunk = body[start : start + 8192]
            conn.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        conn.send(b"0\r\n\r\n")
        response = conn.getresponse()
        status, answer = response.status, json.loads(response.read())
    finally:
        conn.close()
    assert status == 413 and answer["field"] == "body" and "65536" in answer["error"]
    small = json.dumps({"observation": [0.0] * 4}).encode()
    conn = HTTPConnection(app.url.removeprefix("http://"), timeout=30)
    try:  # a chunked body under the limit is answered
        conn.request(
            "POST", "/act", body=iter([small]), headers={"Authorization": f"Bearer {TOKEN}"}
        )
        response = conn.getresponse()
        assert response.status == 200, response.read()
        assert json.loads(response.read())["action"] in (0, 1)
    finally:
        conn.close()


def test_token_is_required_except_for_healthz(app):
    body = {"observation": [0.0, 0.0, 0.0, 0.0]}
    assert act(app, body, token=None)[0] == 401
    assert act(app, body, token="wrong")[0] == 401
    assert act(app, body, token=TOKEN[:-1])[0] == 401
    status, answer = http(app.url + "/spec")
    assert status == 401 and "Bearer" in answer["error"]
    assert act(app, body)[0] == 200
    assert http(app.url + "/healthz")[0] == 200


def test_token_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("HIERL_SERVE_TOKEN", "from-env")
    assert ServeOptions().auth_token == "from-env"
    assert ServeOptions(auth_token="").auth_token == ""  # "" turns it off
    assert "from-env" not in repr(ServeOptions())


def test_binds_to_localhost_by_default(app, port):
    assert ServeOptions().host == "127.0.0.1"
    listening = {
        c.laddr.ip
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }
    assert listening == {"127.0.0.1"}


def test_unknown_route_and_method(app):
    assert http(app.url + "/nope", token=TOKEN)[0] == 404
    assert http(app.url + "/act", token=TOKEN)[0] == 405  # GET


def test_without_the_token_a_client_learns_no_routes(app):
    for url, body in [
        ("/nope", None),
        ("/nope", {}),
        ("/act", None),  # GET: the wrong method
        ("/spec", {}),  # POST
        ("/healthz", {}),  # POST: only GET /healthz needs no token
    ]:
        status, answer = http(app.url + url, body)
        assert status == 401, (url, body, answer)
        assert "route" not in answer["error"]


# -- slow clients -------------------------------------------------------------------------
SLOW_HEAD = (
    b"POST /slow/act HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b'Content-Length: 100\r\n\r\n{"observ'
)


def stalled_body(port: int, statuses: list, stop: threading.Event) -> None:
    """A client on 127.0.0.2 that sends its headers and 8 of its 100 body bytes, then
    nothing; records the status it is answered (None: none), and gives up after 40 s
    or at ``stop``."""
    with socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0)) as s:
        s.sendall(SLOW_HEAD)
        s.settimeout(0.2)
        answer = b""
        deadline = time.monotonic() + 40
        while b"\r\n" not in answer and time.monotonic() < deadline and not stop.is_set():
            try:
                chunk = s.recv(4096)
            except TimeoutError:
                continue
            if not chunk:
                break
            answer += chunk
        statuses.append(int(answer.split()[1]) if answer.startswith(b"HTTP/") else None)


def test_stalled_bodies_neither_hold_every_slot_nor_stop_other_clients(ppo, port):
    """12 clients on one address stall in their bodies; the replica holds 8 requests.
    Before the limits they held every slot and /healthz and /act waited until they let
    go; now one address holds at most 2 (429 for the rest at once), each for at most
    body_timeout_s (then 408), and another client is answered meanwhile."""
    served = deploy(
        ppo[1],
        port=port,
        name="slow",
        route_prefix="/slow",
        auth_token="",
        max_batch_size=4,
        max_ongoing_requests=8,
        # long enough for all 12 to arrive while the first two hold their slots, on a
        # loaded machine too (else a late one is admitted, not refused)
        body_timeout_s=8.0,
        max_body_reads_per_client=2,
        **REPLICA,
    )
    statuses: list = []
    stop = threading.Event()
    slow = [threading.Thread(target=stalled_body, args=(port, statuses, stop)) for _ in range(12)]
    # headers never finished hold a connection of Serve's proxy (it has no deadline for
    # them), never a replica's slot
    stalled_heads = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
    try:
        for s in stalled_heads:
            s.sendall(b"POST /slow/act HTTP/1.1\r\nHost: x\r\nContent-Len")
        for t in slow:
            t.start()
        for _ in range(100):  # the refused ones are answered at once (bounded wait)
            if len(statuses) >= 10:
                break
            time.sleep(0.05)
        # another client (127.0.0.1) is served while two bodies are still stalled
        conn = HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", "/slow/healthz")
            response = conn.getresponse()
            assert response.status == 200 and json.loads(response.read())["status"] == "ok"
            body = json.dumps({"observation": [0.0] * 4})
            conn.request("POST", "/slow/act", body=body)
            response = conn.getresponse()
            assert response.status == 200 and json.loads(response.read())["action"] in (0, 1)
        finally:
            conn.close()
        for t in slow:
            t.join(timeout=45)
    finally:
        stop.set()
        for t in slow:
            t.join(timeout=30)
        for s in stalled_heads:
            s.close()
        served.delete()
    assert sorted(statuses, key=str) == [408] * 2 + [429] * 10, statuses


def test_timeouts_and_body_limits_are_checked_settings():
    with pytest.raises(ConfigError, match=r"body_timeout_s.*request_timeout_s"):
        ServeOptions(body_timeout_s=60, request_timeout_s=30)
    with pytest.raises(ConfigError, match="max_body_reads_per_client"):
        ServeOptions(max_body_reads_per_client=0)
    assert ServeOptions().max_body_reads_per_client == 33
    assert ServeOptions(max_batch_size=4, max_ongoing_requests=8).max_body_reads_per_client == 2
    with pytest.raises(ConfigError, match="request_timeout_s"):
        ServeOptions(request_timeout_s=0)


# -- corrupt checkpoints ------------------------------------------------------------------
@pytest.fixture
def corrupt(ppo, tmp_path):
    path = tmp_path / "corrupt"
    shutil.copytree(ppo[1], path)
    (path / "arrays.npz").write_bytes(b"not a zip file")
    return path


def test_corrupt_checkpoint_fails_with_the_checkpoint_error(corrupt, port):
    with pytest.raises(CheckpointError, match=r"arrays\.npz.*corrupt"):
        deploy(corrupt, port=port, name="corrupt", **REPLICA)


def test_non_loopback_host_without_token_warns(corrupt, caplog):
    # the corrupt checkpoint stops deploy before Serve binds anything
    for host, token, warns in [
        ("0.0.0.0", "", True),
        ("192.0.2.1", "", True),
        ("0.0.0.0", TOKEN, False),
        ("127.0.0.1", "", False),
        ("localhost", "", False),
        ("::1", "", False),
    ]:
        caplog.clear()
        with (
            caplog.at_level("WARNING", logger="hierl.serve.deployment"),
            pytest.raises(CheckpointError),
        ):
            deploy(corrupt, host=host, auth_token=token, **REPLICA)
        warned = [r for r in caplog.records if "without an auth token" in r.getMessage()]
        assert bool(warned) == warns, (host, token)
        if warns:
            assert host in warned[0].getMessage()


def test_cli_serve_corrupt_checkpoint_prints_one_error_line(corrupt, capsys):
    assert main(["serve", str(corrupt), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hierl: error: ") and "corrupt" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert main(["serve", str(corrupt.parent / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.timeout(150)
def test_cli_serve_prints_the_url_answers_and_stops_on_ctrl_c(ppo):
    port = free_port()
    env = {**os.environ, "HIERL_SERVE_TOKEN": TOKEN}
    argv = [sys.executable, "-m", "hierl.cli", "serve", str(ppo[1]), "--port", str(port)]
    flags = ["--num-cpus", "0.25", "--body-timeout-s", "1"]
    proc = subprocess.Popen(
        [*argv, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        preexec_fn=sigint_as_from_a_terminal,
    )
    try:
        out = b""
        deadline = time.monotonic() + 120
        while b"Ctrl-C" not in out:  # it prints 3 lines, then waits
            ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
            chunk = os.read(proc.stdout.fileno(), 4096) if ready else b""
            if not chunk:
                break
            out += chunk
        assert f"POST http://127.0.0.1:{port}/act" in out.decode(), out
        url = f"http://127.0.0.1:{port}"
        assert http(url + "/act", {"observation": [0.0] * 4})[0] == 401  # token from env
        status, answer = http(url + "/act", {"observation": [0.0] * 4}, token=TOKEN)
        assert status == 200 and answer["version"]["iteration"] == 1
        # --body-timeout-s 1: a stalled body is cut after 1 s (the default waits 10 s)
        head = f"POST /act HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(head.encode() + b'Content-Length: 100\r\n\r\n{"observ')
            s.settimeout(30)  # 1 s, plus a loaded machine's scheduling
            assert s.recv(4096).split()[1] == b"408"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


# -- filters and recurrent state ----------------------------------------------------------
def test_mean_std_filter_and_recurrent_state_as_in_training(port, tmp_path):
    config = {
        **SMALL_PPO,
        "seed": 0,
        "observation_filter": "MeanStdFilter",
        "model": {"hiddens": (16,), "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 8},
    }
    with PPOTrainer(config) as trainer:
        trainer.train()
        rs = trainer.local_evaluator.filters["default_policy"].rs
        assert rs.n > 0 and np.abs(rs.mean).max() > 1e-3  # the filter is not the identity
        served = deploy(
            trainer.save(tmp_path / "lstm"), port=port, name="lstm", route_prefix="/lstm", **REPLICA
        )
        try:
            status, spec = http(served.url + "/spec")
            assert status == 200 and spec["observation_filter"] == "MeanStdFilter"
            assert spec["policies"]["default_policy"]["state_shapes"] == [[8], [8]]
            # a batch from the initial state
            obs = random_obs(200, seed=3)
            status, answer = http(served.url + "/act", {"observations": obs.tolist()})
            assert status == 200, answer
            expected = [trainer.compute_single_action_and_state(o)[0] for o in obs]
            assert answer["actions"] == [int(a) for a in expected]
            # an episode, carrying the state from answer to request
            env = gym.make("CartPole-v1")
            o, _ = env.reset(seed=0)
            state, served_state = None, None
            for _ in range(30):
                a, state = trainer.compute_single_action_and_state(o, state)
                body = {"observation": o.tolist()}
                if served_state is not None:
                    body["state"] = served_state
                status, answer = http(served.url + "/act", body)
                assert status == 200, answer
                assert answer["action"] == int(a)
                np.testing.assert_allclose(answer["state_out"], np.stack(state), atol=1e-5)
                served_state = answer["state_out"]
                o, _, terminated, truncated, _ = env.step(a)
                if terminated or truncated:
                    o, _ = env.reset()
                    state = served_state = None
            status, answer = http(served.url + "/act", {"observation": o.tolist(), "state": [[0]]})
            assert status == 400 and answer["field"] == "state" and "[[8], [8]]" in answer["error"]
        finally:
            served.delete()


def test_state_rows_are_checked_against_max_observations():
    config = {**SMALL_PPO, "model": {"hiddens": (8,), "use_lstm": True, "lstm_cell_size": 4}}
    with PPOTrainer(config) as trainer:
        n = MAX_BATCH + 1
        policy = ServedPolicy(trainer, max_observations=n)
        state = [[[0.0] * 4] * n, [[0.0] * 4] * n]
        query = policy.parse({"observations": [[0.0] * 4] * n, "state": state})
        assert query.count == n and [s.shape for s in query.state] == [(n, 4), (n, 4)]
        (answer,) = policy.act([query])
        assert len(answer["actions"]) == n and np.shape(answer["state_out"]) == (2, n, 4)


def test_recurrent_state_beyond_float32_is_refused():
    config = {**SMALL_PPO, "model": {"hiddens": (8,), "use_lstm": True, "lstm_cell_size": 4}}
    with PPOTrainer(config) as trainer:
        policy = ServedPolicy(trainer)
        with pytest.raises(WireError, match=r"1e\+300.*float32") as e:
            policy.parse({"observation": [0.0] * 4, "state": [[0, 0, 1e300, 0], [0] * 4]})
        assert e.value.field == "state[0]"


def test_serving_opens_neither_the_run_s_input_nor_its_output(tmp_path):
    """A replica samples nothing: an external input's port is not bound (a second replica
    would fail), logged files need not exist, the output directory gets nothing."""
    logged, out = tmp_path / "logged", tmp_path / "out"
    with PPOTrainer({**SMALL_PPO, "output": str(logged)}) as trainer:
        trainer.train()
    assert list(logged.iterdir())
    with PPOTrainer({**SMALL_PPO, "input": str(logged), "output": str(out)}) as trainer:
        offline = trainer.save(tmp_path / "offline")
    shutil.rmtree(logged)
    shutil.rmtree(out, ignore_errors=True)
    external_port = free_port()
    config = {**SMALL_PPO, "input": "external", "input_external": {"port": external_port}}
    with PPOTrainer(config) as trainer:
        external = trainer.save(tmp_path / "external")
    served = [ServedPolicy.from_checkpoint(p) for p in (offline, external, external)]
    try:
        for policy in served:
            (answer,) = policy.act([policy.parse({"observations": random_obs(4, 5).tolist()})])
            assert set(answer["actions"]) <= {0, 1}
        assert not out.exists() or not list(out.iterdir())
        with socket.socket() as s:  # the external server's port is free
            s.bind(("127.0.0.1", external_port))
    finally:
        for policy in served:
            policy.stop()


# -- hot swap -----------------------------------------------------------------------------
def test_hot_swap_under_load_answers_with_one_whole_version(ppo, port):
    served = deploy(ppo[1], port=port, name="swap", route_prefix="/swap", num_replicas=2, **REPLICA)
    checkpoint_version = served.spec["hash"]
    trainer = PPOTrainer({**SMALL_PPO, "seed": 1, "serve_deployment": {"app": "swap"}})
    answers, failures = [], []
    stop = threading.Event()

    def client(seed: int) -> None:
        rng = np.random.default_rng(seed)
        while not stop.is_set():
            obs = random_obs(4, seed=int(rng.integers(1 << 30)))
            try:
                status, answer = http(served.url + "/act", {"observations": obs.tolist()})
            except Exception as e:  # any failure is one: recorded, asserted below
                failures.append(repr(e))
                continue
            if status != 200:
                failures.append((status, answer))
            else:
                answers.append((obs, answer["actions"], answer["version"]))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(16)]
    policies = {checkpoint_version: ppo[0].get_weights()["default_policy"]}
    try:
        for t in threads:
            t.start()
        rng = np.random.default_rng(0)
        # At least 10 pushes, and on until the clients have seen 4 versions in 50 answers
        # (what 16 clients get through in a push depends on the machine's load).
        for pushes in itertools.count(1):
            # very different weights each time: a mixed answer could not match any version
            weights = trainer.get_weights()["default_policy"]
            trainer.set_weights(
                {
                    "default_policy": {
                        k: rng.normal(0, 1, v.shape).astype(v.dtype) for k, v in weights.items()
                    }
                }
            )
            result = trainer.train()
            version = PolicySnapshot.of(trainer).version
            assert result["serve_version"] == version["hash"]  # the push reached every replica
            policies[version["hash"]] = copy.deepcopy(trainer.get_weights()["default_policy"])
            seen = {version["hash"] for _, _, version in list(answers)}
            if (pushes >= 10 and len(answers) > 50 and len(seen) >= 4) or pushes == 40:
                break
        pushed_at = len(answers)
        deadline = time.monotonic() + 30
        while len(answers) < pushed_at + 48 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        served.delete()
    assert not failures, failures[:3]
    assert len(answers) >= pushed_at + 48 and pushed_at > 50
    seen = {version["hash"] for _, _, version in answers}
    assert seen <= set(policies)
    assert len(seen) >= 4  # swaps happened while clients were querying
    last = result["serve_version"]
    assert all(v["hash"] == last for _, _, v in answers[pushed_at + 32 :])
    # every answer is exactly the greedy action of the version it names
    policy = trainer.get_policy()
    for version_hash, weights in policies.items():
        mine = [(obs, actions) for obs, actions, v in answers if v["hash"] == version_hash]
        if not mine:
            continue
        policy.set_weights(weights)
        obs = np.concatenate([o for o, _ in mine])
        expected, _, _ = policy.compute_actions(obs, explore=False)
        assert np.concatenate([a for _, a in mine]).tolist() == expected.tolist(), version_hash
    trainer.stop()


def test_serve_deployment_config_is_checked_and_a_failed_push_warns(app):
    with pytest.raises(ConfigError, match=r"serve_deployment\.app"):
        PPOTrainer({**SMALL_PPO, "serve_deployment": {"app": ""}})
    with pytest.raises(ConfigError, match=r"serve_deployment\.evry.*every"):
        PPOTrainer({**SMALL_PPO, "serve_deployment": {"app": "x", "evry": 2}})
    with PPOTrainer({**SMALL_PPO, "serve_deployment": {"app": "nope", "every": 2}}) as trainer:
        assert "serve_version" not in trainer.train()  # not due at iteration 1
        with pytest.warns(UserWarning, match="app 'nope' failed.*training goes on"):
            result = trainer.train()
        assert "serve_version" not in result and result["training_iteration"] == 2


# -- learning -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ppo_cartpole_450(ray_session, tmp_path_factory):
    """PPO on CartPole (``PPO_CARTPOLE``: 2 remote evaluators) trained until a mean return
    of 450: ``(run, checkpoint)``.  PPO's CartPole learning test, served."""
    with PPOTrainer({**PPO_CARTPOLE, "seed": SEED}) as trainer:
        assert len(trainer.evaluators.remote_evaluators) == 2
        run = train_until(trainer, 450, 250_000)
        path = trainer.save(tmp_path_factory.mktemp("ppo_cartpole") / "learned")
    return run, path


@pytest.mark.learning
@pytest.mark.timeout(400)
def test_served_ppo_scores_450_driven_over_http(port, ppo_cartpole_450):
    run, path = ppo_cartpole_450  # PPO trained to a mean return of 450
    assert run.reached, run
    served = deploy(path, port=port, name="learned", route_prefix="/learned", **REPLICA)
    try:
        # five episodes side by side: one request per step carries every running env's
        # observation (500 requests, not 2,500)
        envs = [gym.make("CartPole-v1") for _ in range(5)]
        obs = [env.reset(seed=SEED * 100 + i)[0] for i, env in enumerate(envs)]
        returns, running = [0.0] * len(envs), list(range(len(envs)))
        while running:
            body = {"observations": [obs[i].tolist() for i in running]}
            status, answer = http(served.url + "/act", body)
            assert status == 200, answer
            for i, action in zip(list(running), answer["actions"], strict=True):
                obs[i], reward, terminated, truncated, _ = envs[i].step(action)
                returns[i] += float(reward)
                if terminated or truncated:
                    running.remove(i)
        assert np.mean(returns) >= 450, returns
    finally:
        served.delete()
