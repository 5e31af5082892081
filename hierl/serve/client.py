"""PolicyClient: drive training episodes from an app that owns its loop (RLlib's
PolicyClient), over plain HTTP.

The trainer runs with ``input: "external"`` (``hierl.evaluators.external``); the
app, in any process, on any machine that can reach it:

    client = PolicyClient("http://127.0.0.1:9900")
    episode = client.start_episode()
    obs, info = env.reset()
    while True:
        action = client.get_action(episode, obs)        # or client.log_action(...)
        obs, reward, terminated, truncated, info = env.step(action)
        client.log_returns(episode, reward)
        if terminated or truncated:
            client.end_episode(episode, obs, truncated=truncated and not terminated)
            break

Remote inference (the default) needs the standard library only: importing this module
loads neither Ray, torch nor numpy, so it runs inside any app.  Rewards logged with
``PolicyClient.log_returns`` travel with the episode's next call (one request per
step).  Observations may be lists, numbers or anything with ``tolist()`` (numpy arrays);
actions come back as JSON values (an int for Discrete, a list for Box).

Local inference (``inference_mode="local"``) needs torch in the app: the client fetches
the policy as TorchScript (``GET /policy``) every ``update_interval_s`` seconds,
computes actions itself (sampling the policy's action distribution in training
episodes) and sends the episodes' steps in batches (at each episode's end, at least
every ``update_interval_s``, and whenever ``MAX_BUFFERED_EVENTS`` steps or
``MAX_FLUSH_BYTES`` are buffered), so a step costs no request.  Each step carries the
log-likelihood of its action under the client's copy of the policy, which the server
trains on as the behaviour policy's.  A batch whose answer is lost (the server is
unreachable, or timed out) stays buffered, up to ``MAX_RETAINED_BYTES``, and is sent
again under the same id with the next flush (the server applies it once); calls the
server refuses (e.g. an episode it dropped as idle) are logged and returned by
``PolicyClient.flush``, the others are applied.  Feed-forward policies only.
"""

from __future__ import annotations

import http.client
import io
import json
import logging
import math
import threading
import time
import urllib.parse
import uuid
from typing import Any, Literal

from hierl.auth import CLIENT_HEADER, TOKEN_ENV, token_from_env

__all__ = ["TOKEN_ENV", "PolicyClient", "PolicyClientError"]

logger = logging.getLogger(__name__)

MAX_BUFFERED_EVENTS = 10_000
"""Local inference: buffered steps that force a flush before the next interval (and
the most one request carries)."""
MAX_FLUSH_BYTES = 16 << 20
"""Local inference: buffered bytes of JSON that force a flush (and the most one request
carries, but for a single larger step), well under the server's 64 MiB body limit."""
MAX_RETAINED_BYTES = 256 << 20
"""Local inference: batches kept for a resend after failed flushes; beyond it the
oldest are dropped (logged)."""
RETRY_STATUSES = (None, 502, 503, 504)
"""Flush failures after which the batch is kept for a resend (no answer, or a proxy's
or a busy server's)."""


class PolicyClientError(RuntimeError):
    """A call failed: ``status`` is the server's HTTP status (None: no answer, e.g. the
    server is unreachable or timed out) and the message includes the server's own."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def _json_value(value: Any) -> Any:
    """JSON for numpy arrays and scalars (``tolist``) without importing numpy."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class PolicyClient:
    """Talks to the server of an ``input: "external"`` evaluator (see the module docstring).

    Args:
        address: the server's URL, ``http://host:port`` (the evaluator's ``port``, or
            ``port + i`` for remote evaluator ``i``).
        inference_mode: ``remote`` (the server picks every action) or ``local`` (the
            client runs the policy; needs torch).
        update_interval_s: local mode: how often the policy is fetched again and the
            buffered steps sent.
        auth_token: the server's shared token (None: ``$HIERL_SERVE_TOKEN`` if set).
        timeout_s: limit on every request (connecting, sending, waiting for the answer).
        client_id: who this client is to the server (sent as ``X-Hierl-Client`` with
            every request; None: a new random id).  With a token set, the server lets
            only the client that started an episode continue it: give the same id to
            every PolicyClient that drives the same episodes (e.g. a service that makes
            a new PolicyClient per request); keep it secret like the token.

    Raises:
        PolicyClientError: in local mode, the policy cannot be fetched.
    """

    def __init__(
        self,
        address: str = "http://127.0.0.1:9900",
        *,
        inference_mode: Literal["remote", "local"] = "remote",
        update_interval_s: float = 10.0,
        auth_token: str | None = None,
        timeout_s: float = 60.0,
        client_id: str | None = None,
    ):
        if inference_mode not in ("remote", "local"):
            raise ValueError(f"inference_mode {inference_mode!r}; valid: 'remote', 'local'")
        url = urllib.parse.urlsplit(address if "://" in address else f"http://{address}")
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"address {address!r}: expected http://host:port")
        self.address = f"http://{url.netloc}"
        self.host, self.port = url.hostname, url.port or 80
        self.inference_mode = inference_mode
        self.update_interval_s = update_interval_s
        self.timeout_s = timeout_s
        token = auth_token or token_from_env()
        self.client_id = client_id or uuid.uuid4().hex
        self._headers = {"Content-Type": "application/json", CLIENT_HEADER: self.client_id}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._local = threading.local()  # one keep-alive connection per thread
        self._lock = threading.Lock()
        self._rewards: dict[str, float] = {}  # logged returns not sent yet
        self._training: dict[str, bool] = {}
        self._events: list[bytes] = []  # buffered calls, as JSON
        self._buffered_bytes = 0
        self._unsent: list[tuple[str, list[bytes]]] = []  # (batch id, calls) to resend
        self._flush_lock = threading.Lock()  # one flush at a time: calls stay in order
        self.dropped_events = 0
        """Local inference: buffered calls dropped after failed flushes (over
        ``MAX_RETAINED_BYTES``)."""
        self._policy: _LocalPolicy | None = None
        self._last_update = 0.0
        if inference_mode == "local":
            self.update_policy()

    # -- the episode API ----------------------------------------------------------------
    def start_episode(self, episode_id: str | None = None, training_enabled: bool = True) -> str:
        """Start an episode (``episode_id`` None: a new one); returns its id.  Episodes
        with ``training_enabled`` False act greedily and are not trained on."""
        if self.inference_mode == "local":
            episode_id = uuid.uuid4().hex if episode_id is None else episode_id
            self._buffer(
                {"command": "start", "episode_id": episode_id, "training_enabled": training_enabled}
            )
        else:
            body = {"episode_id": episode_id, "training_enabled": training_enabled}
            episode_id = self._post("/episodes", body)["episode_id"]
        self._training[episode_id] = training_enabled
        return episode_id

    def get_action(self, episode_id: str, observation: Any) -> Any:
        """The policy's action for ``observation`` (recorded as the episode's next step)."""
        if self.inference_mode == "local":
            self._maybe_update()
            explore = self._training.get(episode_id, True)
            action, behaviour = self._policy.act(observation, explore=explore)
            self._buffer(
                self._step("log_action", episode_id, observation, action=action, **behaviour)
            )
            return action
        body = self._step("action", episode_id, observation)
        return self._post(self._episode_path(episode_id, "action"), body)["action"]

    def log_action(self, episode_id: str, observation: Any, action: Any) -> None:
        """Record an action the app chose itself on ``observation`` (off-policy)."""
        body = self._step("log_action", episode_id, observation, action=action)
        if self.inference_mode == "local":
            self._buffer(body)
        else:
            self._post(self._episode_path(episode_id, "log_action"), body)

    def log_returns(
        self, episode_id: str, reward: float, info: dict[str, Any] | None = None
    ) -> None:
        """Add ``reward`` to the episode's current step (sent with the episode's next
        call; ``info`` is sent now and reaches the callbacks' ``on_episode_end``)."""
        with self._lock:
            self._rewards[episode_id] = self._rewards.get(episode_id, 0.0) + float(reward)
        if info is None:
            return
        body = {"reward": self._take_reward(episode_id), "info": info}
        if self.inference_mode == "local":
            self._buffer({"command": "returns", "episode_id": episode_id, **body})
        else:
            self._post(self._episode_path(episode_id, "returns"), body)

    def end_episode(self, episode_id: str, observation: Any, truncated: bool = False) -> None:
        """End the episode at its final ``observation``: terminated, or ``truncated`` (a
        time limit; its last value is bootstrapped).  Only ended episodes are trained on."""
        body = self._step("end", episode_id, observation, truncated=truncated)
        self._training.pop(episode_id, None)
        if self.inference_mode == "local":
            self._buffer(body)
            self.flush()
        else:
            self._post(self._episode_path(episode_id, "end"), body)

    # -- local inference ------------------------------------------------------------------
    def update_policy(self) -> None:
        """Local mode: fetch the server's current policy (and send the buffered steps)."""
        data, headers = self._request("GET", "/policy", None, raw=True)
        self._policy = _LocalPolicy(data, headers, self._get("/spec")["action_space"])
        self._last_update = time.monotonic()
        self.flush()

    def flush(self) -> list[dict[str, Any]]:
        """Local mode: send the buffered steps now (one request per ``MAX_FLUSH_BYTES`` /
        ``MAX_BUFFERED_EVENTS``); returns the calls the server refused (each with its
        ``command``, ``episode_id``, ``status`` and ``error``; also logged).

        Raises:
            PolicyClientError: a request failed; with no answer (or 502, 503, 504) the
                unsent batches stay buffered for the next flush.
        """
        with self._flush_lock:
            with self._lock:
                events, self._events, self._buffered_bytes = self._events, [], 0
            batches = self._unsent + [(uuid.uuid4().hex, c) for c in _chunks(events)]
            self._unsent = []
            refused: list[dict[str, Any]] = []
            for i, (batch_id, calls) in enumerate(batches):
                body = b'{"batch_id":"%s","events":[%s]}' % (batch_id.encode(), b",".join(calls))
                try:
                    answer = self._request("POST", "/events", body)
                except PolicyClientError as e:
                    if e.status in RETRY_STATUSES:
                        self._keep_unsent(batches[i:])
                    raise
                for index in answer.get("failed", []):
                    call = json.loads(calls[index])
                    result = answer["results"][index]
                    refused.append(
                        {
                            "command": call.get("command"),
                            "episode_id": call.get("episode_id"),
                            "status": result.get("status"),
                            "error": result.get("error"),
                        }
                    )
        if refused:
            logger.warning(
                "the policy server refused %d buffered calls (the others were applied); "
                "first: %s %s: HTTP %s: %s",
                len(refused),
                *(refused[0][k] for k in ("command", "episode_id", "status", "error")),
            )
        return refused

    def _keep_unsent(self, batches: list[tuple[str, list[bytes]]]) -> None:
        """Keep ``batches`` for the next flush, dropping the oldest over the limit."""
        size = sum(len(c) for _, calls in batches for c in calls)
        while batches and size > MAX_RETAINED_BYTES:
            _, calls = batches.pop(0)
            size -= sum(len(c) for c in calls)
            self.dropped_events += len(calls)
            logger.warning(
                "dropped %d buffered calls: the policy server has not answered and more "
                "than %d bytes wait for it",
                len(calls),
                MAX_RETAINED_BYTES,
            )
        self._unsent = batches

    def _maybe_update(self) -> None:
        if time.monotonic() - self._last_update >= self.update_interval_s:
            self.update_policy()

    def _buffer(self, event: dict[str, Any]) -> None:
        data = json.dumps(event, default=_json_value).encode()
        with self._lock:
            self._events.append(data)
            self._buffered_bytes += len(data)
            full = (
                len(self._events) >= MAX_BUFFERED_EVENTS or self._buffered_bytes >= MAX_FLUSH_BYTES
            )
        if full:
            self.flush()

    # -- helpers --------------------------------------------------------------------------
    def _step(self, command: str, episode_id: str, observation: Any, **fields: Any) -> dict:
        body = {"command": command, "episode_id": episode_id, "observation": observation}
        body.update(fields)
        reward = self._take_reward(episode_id)
        if reward:
            body["reward"] = reward
        return body

    def _take_reward(self, episode_id: str) -> float:
        with self._lock:
            return self._rewards.pop(episode_id, 0.0)

    @staticmethod
    def _episode_path(episode_id: str, command: str) -> str:
        return f"/episodes/{urllib.parse.quote(str(episode_id), safe='')}/{command}"

    def _get(self, path: str) -> Any:
        return self._request("GET", path, None)

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body`` as JSON; the decoded answer."""
        return self._request("POST", path, json.dumps(body, default=_json_value).encode())

    def _request(self, method: str, path: str, data: bytes | None, raw: bool = False) -> Any:
        """One request on this thread's keep-alive connection (reconnecting once if the
        server closed it); errors become PolicyClientError."""
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            reused = conn is not None
            if conn is None:
                conn = self._local.conn = http.client.HTTPConnection(
                    self.host, self.port, timeout=self.timeout_s
                )
            try:
                conn.request(method, path, body=data, headers=self._headers)
                response = conn.getresponse()
                payload = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._drop_connection()
                if reused and attempt == 0:
                    continue  # a stale keep-alive connection: retry once on a new one
                raise PolicyClientError(f"{method} {self.address}{path}: {e}") from e
            except http.client.HTTPException as e:  # e.g. the server closed mid-answer
                self._drop_connection()
                raise PolicyClientError(f"{method} {self.address}{path}: {e!r}") from e
            except TimeoutError as e:
                self._drop_connection()
                raise PolicyClientError(
                    f"{method} {self.address}{path}: no answer within {self.timeout_s:g} s"
                ) from e
            except OSError as e:
                self._drop_connection()
                raise PolicyClientError(
                    f"cannot reach the policy server at {self.address}: {e} (is the trainer "
                    "with input 'external' running, and listening there?)"
                ) from e
            if response.status >= 400:
                raise PolicyClientError(
                    f"{method} {path}: HTTP {response.status}: {_server_message(payload)}",
                    response.status,
                )
            if raw:
                return payload, dict(response.getheaders())
            return json.loads(payload)
        raise AssertionError("unreachable")

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def close(self) -> None:
        """Send the buffered steps (local mode) and close this thread's connection."""
        if self.inference_mode == "local":
            self.flush()
        self._drop_connection()


def _chunks(calls: list[bytes]) -> list[list[bytes]]:
    """``calls`` in runs of at most ``MAX_BUFFERED_EVENTS`` calls and ``MAX_FLUSH_BYTES``
    bytes (a larger single call alone)."""
    out: list[list[bytes]] = []
    size = 0
    for call in calls:
        if not out or len(out[-1]) >= MAX_BUFFERED_EVENTS or size + len(call) > MAX_FLUSH_BYTES:
            out.append([])
            size = 0
        out[-1].append(call)
        size += len(call)
    return out


def _server_message(payload: bytes) -> str:
    try:
        return str(json.loads(payload)["error"])
    except (ValueError, KeyError, TypeError):
        return payload[:500].decode(errors="replace")


SAMPLED = ("Categorical", "MultiCategorical", "DiagGaussian")
"""The action distributions a local-inference client samples (others act greedily)."""


class _LocalPolicy:
    """The fetched TorchScript policy and how to sample its actions (needs torch)."""

    def __init__(self, model: bytes, headers: dict[str, str], action_space: dict[str, Any]):
        try:
            import torch
        except ImportError as e:
            raise PolicyClientError(
                "inference_mode='local' runs the policy in this process and needs torch "
                "(pip install torch); inference_mode='remote' needs nothing"
            ) from e
        headers = {k.lower(): v for k, v in headers.items()}
        if headers.get("x-policy-recurrent") == "true":
            raise PolicyClientError(
                "inference_mode='local' runs feed-forward policies; this one is recurrent "
                "(use inference_mode='remote')"
            )
        self.torch = torch
        self.model = torch.jit.load(io.BytesIO(model), map_location="cpu")
        self.version = headers.get("x-policy-version", "")
        self.dtype = getattr(torch, headers.get("x-policy-input-dtype", "float32"))
        self.distribution = headers.get("x-action-distribution", "greedy")
        self.space = action_space

    def act(self, observation: Any, explore: bool) -> tuple[Any, dict[str, Any]]:
        """The env action for one observation (sampled when ``explore`` and the policy's
        distribution is known, else greedy), as a JSON value, and what the server
        records as the behaviour policy's: ``action_logp`` (the log-likelihood of that
        action under this copy of the policy, as the server's ``dist_class`` computes
        it) and ``action_dist_inputs`` (none for ``greedy`` policies)."""
        torch = self.torch
        if hasattr(observation, "tolist"):
            observation = observation.tolist()
        with torch.no_grad():
            obs = torch.as_tensor([observation], dtype=self.dtype)
            greedy, dist_inputs, _ = self.model(obs)
            greedy, inputs = greedy[0], dist_inputs[0].double()
            if self.distribution not in SAMPLED:  # "greedy": the server's compute_actions
                return greedy.tolist(), {}
            action = self._sample(greedy, inputs) if explore else greedy
            logp = float(self._logp(action, greedy, inputs))
        if not math.isfinite(logp):
            return action.tolist(), {}  # the server computes it (e.g. an impossible action)
        return action.tolist(), {"action_logp": logp, "action_dist_inputs": inputs.tolist()}

    def _logp(self, action: Any, greedy: Any, inputs: Any) -> Any:
        """Log-likelihood of the env ``action`` (as the server's ACTIONS row) under the
        distribution of ``inputs``."""
        torch = self.torch
        if self.distribution == "Categorical":
            index = action - (greedy - inputs.argmax())  # less the space's start
            return torch.log_softmax(inputs, -1)[index]
        if self.distribution == "MultiCategorical":
            parts = torch.split(inputs, list(self.space["nvec"]))
            shift = greedy.reshape(-1) - torch.stack([p.argmax() for p in parts])
            index = action.reshape(-1) - shift
            return sum(torch.log_softmax(p, -1)[i] for p, i in zip(parts, index, strict=True))
        mean, log_std = self._gaussian(inputs)
        z = (action.reshape(-1).double() - mean) / log_std.exp()
        return (-0.5 * z * z - log_std - 0.5 * math.log(2.0 * math.pi)).sum()

    def _gaussian(self, inputs: Any) -> tuple[Any, Any]:
        """Mean and log-std of DiagGaussian inputs, the log-std clamped as the server's."""
        mean, log_std = self.torch.chunk(inputs, 2)
        return mean, log_std.clamp(-20.0, 2.0)

    def _sample(self, greedy: Any, inputs: Any) -> Any:
        torch = self.torch
        if self.distribution == "Categorical":
            # the greedy env action minus the argmax is the space's start
            return torch.multinomial(torch.softmax(inputs, -1), 1)[0] + greedy - inputs.argmax()
        if self.distribution == "MultiCategorical":
            parts = torch.split(inputs, list(self.space["nvec"]))
            picks = torch.stack([torch.multinomial(torch.softmax(p, -1), 1)[0] for p in parts])
            argmax = torch.stack([p.argmax() for p in parts])
            return picks + greedy.reshape(-1) - argmax
        if self.distribution == "DiagGaussian":
            mean, log_std = self._gaussian(inputs)
            action = mean + log_std.exp() * torch.randn_like(mean)
            low = torch.as_tensor(self.space["low"], dtype=action.dtype).reshape(-1)
            high = torch.as_tensor(self.space["high"], dtype=action.dtype).reshape(-1)
            action = torch.minimum(torch.maximum(action, low), high)
            return action.reshape(self.space["shape"]).to(greedy.dtype)
        return greedy
