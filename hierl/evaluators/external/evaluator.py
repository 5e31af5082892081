"""ExternalEvaluator: a PolicyEvaluator whose ``sample()`` returns the episodes that
external apps drive over HTTP (``input: "external"``; RLlib's ExternalEnv /
PolicyServerInput).

The app owns the loop and calls a ``hierl.serve.client.PolicyClient``; the
evaluator runs an ``ExternalServer`` in its own
process and answers with its current policy (exploring in episodes started with
``training_enabled``; concurrent clients' observations are batched into one
``compute_actions``).  Where the evaluators listen:

* ``num_evaluators=0``: the driver's local evaluator, on ``input_external.port``;
* ``num_evaluators=N``: remote evaluator ``i`` (1..N) on ``port + i``; the local one
  does not listen (it does not sample).  Spread the clients over the N ports.

``sample()`` blocks until the ended episodes hold at least ``rollout_fragment_length *
num_envs`` steps and returns them whole (as ``batch_mode="complete_episodes"``),
postprocessed by the policy exactly as the sampler does; after ``WAIT_FRACTION *
sample_timeout_s`` it returns the ended episodes it has, or raises
``ExternalInputTimeout`` if there are none.  (The driver waits ``sample_timeout_s``
for a remote evaluator's ``sample()`` from when it submits it: the evaluator gives up
sooner, so that the partial batch reaches the driver instead of a ``GetTimeoutError``.)
Episode metrics (``episode_reward_mean`` ...) come from every ended episode.

The observation and action spaces are those of the trainer's ``env``, which is only
created to read them (a Gymnasium id, or a creator returning ``SpacesEnv`` when
the app has no gym.Env).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import logging
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from hierl.config import ConfigError
from hierl.evaluators.external.episodes import ActionRequest, EpisodeError, ExternalEpisodes
from hierl.evaluators.external.server import ExternalServer
from hierl.evaluators.external.settings import ExternalInputConfig
from hierl.evaluators.policy_evaluator import PolicyEvaluator, locked
from hierl.evaluators.rollout_core import EpisodeRecord, RolloutCore, act
from hierl.evaluators.spec import EvaluatorSpec
from hierl.evaluators.wire import (
    WireError,
    decode_floats,
    decode_number,
    decode_observations,
    encode,
    short_repr,
    space_to_json,
)
from hierl.models.networks import ModelConfig
from hierl.policy_graph import PolicyGraph
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch
from hierl.utils import array_digest

logger = logging.getLogger(__name__)

WAIT_FRACTION = 0.75
"""``sample()`` waits at most this fraction of ``sample_timeout_s`` for ended episodes:
the driver's ``ray.get`` of a remote evaluator's sample waits the whole
``sample_timeout_s`` from submission, and must not give up before the partial batch
arrives (the rest of the time covers queueing behind other calls and the transfer)."""

MAX_ID_CHARS = 256
"""Longest episode id and ``/events`` batch id a client may choose."""

REMEMBERED_BATCHES = 1024
"""``POST /events`` batch ids remembered with their answers: a client that lost an
answer re-sends the batch under its id and gets the same answer, applied once."""


class ExternalInputTimeout(TimeoutError):
    """No client ended an episode within ``sample_timeout_s``."""


class SpacesEnv(gym.Env):
    """An env that only declares spaces: the ``env`` of a trainer fed by external apps
    that have no gym.Env (``env: lambda ctx: SpacesEnv(obs_space, action_space)``).
    It cannot be stepped."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space):
        self.observation_space = observation_space
        self.action_space = action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        """Not playable: external apps drive the episodes."""
        raise NotImplementedError("SpacesEnv only declares spaces for input 'external'")

    def step(self, action: Any) -> Any:
        """Not playable: external apps drive the episodes."""
        raise NotImplementedError("SpacesEnv only declares spaces for input 'external'")


class ExternalEvaluator(PolicyEvaluator):
    """A PolicyEvaluator serving external episodes (see the module docstring).

    Raises:
        ConfigError: multi-agent policies or ``sample_async`` (the server already
            receives episodes in the background).
        OSError: the port cannot be bound.
    """

    def __init__(
        self, spec: EvaluatorSpec, *, worker_index: int = 0, num_threads: int | None = None
    ):
        super().__init__(spec, worker_index=worker_index, num_threads=num_threads)
        if self.multi_agent:
            raise ConfigError(
                "config field 'input' = 'external' serves single-agent episodes; "
                "multi-agent external environments are not supported"
            )
        if spec.sampling.sample_async:
            raise ConfigError(
                "config field 'sample_async' does not apply to input 'external' (its server "
                "already collects episodes in the background): set it to False"
            )
        self.settings: ExternalInputConfig = spec.input.external or ExternalInputConfig()
        self.batch_size = (
            spec.sampling.rollout_fragment_length * spec.sampling.num_envs_per_evaluator
        )
        self.sample_timeout_s = spec.input.sample_timeout_s
        self.wait_s = WAIT_FRACTION * self.sample_timeout_s
        """How long ``sample()`` waits for ended episodes (see ``WAIT_FRACTION``)."""
        self._exported: tuple[str, bytes, dict[str, str]] | None = None
        self._arrived = threading.Event()
        self._pending: list[ActionRequest] = []
        self._pending_lock = threading.Lock()
        self._batches: collections.OrderedDict[str, _EventBatch] = collections.OrderedDict()
        self._batches_lock = threading.Lock()
        self._extra_sizes: dict[str, int] | None = None
        # CRUCIAL: clients are answered by a copy of the policy, refreshed when sampling
        # starts and when weights arrive: optimizers train ``policy`` in place without the
        # evaluator's lock, so acting on it could read half-updated weights.
        self.acting = copy.deepcopy(self.policy)
        self.core = RolloutCore(
            env_id=self.env_name, worker_index=worker_index, callbacks=self.callbacks
        )
        self.episodes = ExternalEpisodes(
            self.acting,
            self.preprocessor,
            self.filters[DEFAULT_POLICY_ID],
            self.core,
            explore=spec.explore,
            clip_rewards=spec.sampling.clip_rewards,
            episode_timeout_s=self.settings.episode_timeout_s,
            max_episodes=self.settings.max_episodes,
            max_episode_steps=self.settings.max_episode_steps,
            max_info_bytes=self.settings.max_info_bytes,
            on_finished=self._arrived.set,
        )
        cls = type(self.policy)
        self._postprocess = (
            cls.postprocess_trajectory is not PolicyGraph.postprocess_trajectory
            or cls.postprocess_trajectories is not PolicyGraph.postprocess_trajectories
        )
        self._bind_episodes = bool(self.settings.token())
        """With a token, episodes answer only the client that started them."""
        self.server: ExternalServer | None = None
        if worker_index > 0 or spec.input.num_shards == 0:
            self.server = ExternalServer(
                self,
                self.settings.host,
                self.settings.port_for(worker_index),
                token=self.settings.token(),
                name=f"input 'external' of evaluator {worker_index}",
                idle_timeout_s=self.settings.episode_timeout_s,
                request_timeout_s=self.settings.request_timeout_s,
                max_connections=self.settings.max_connections,
                max_request_bytes=self.settings.max_request_bytes,
            )

    @property
    def address(self) -> tuple[str, int] | None:
        """``(host, port)`` this evaluator listens on (None: it does not listen)."""
        return None if self.server is None else self.server.address

    def get_address(self) -> tuple[str, int] | None:
        """``address`` (callable on a remote evaluator)."""
        return self.address

    # -- sampling ---------------------------------------------------------------------
    def _sample_now(self) -> SampleBatch:
        with self._lock:
            self._sync_acting()
        deadline = time.monotonic() + self.wait_s
        while True:
            self._arrived.clear()
            with self._lock:
                self.episodes.drop_idle()
                ready = self.episodes.finished_rows
            if ready >= self.batch_size:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                if ready:
                    break
                raise ExternalInputTimeout(self._timeout_message())
            self._arrived.wait(min(left, 0.5))
        with self._lock:
            raw = self.episodes.take_finished()
            return self._finish(SampleBatch.concat_samples(raw))

    def _finish(self, batch: SampleBatch) -> SampleBatch:
        """As the sampler finishes a batch: output, postprocessing, callbacks, sequences."""
        if self.writer is not None and not self.spec.output.postprocessed:
            self.writer.write_policy_batch(DEFAULT_POLICY_ID, SampleBatch(dict(batch)), False)
        if self._postprocess:
            batch = self.policy.postprocess_trajectories(batch)
        if self.core.trajectory_hook and batch.count:
            trajectories = batch.split_by_episode()
            for trajectory in trajectories:
                self.core.postprocessed(trajectory, DEFAULT_POLICY_ID, self.policy)
            batch = SampleBatch.concat_samples(trajectories)
        if self.policy.get_initial_state():
            max_seq_len = getattr(self.policy, "max_seq_len", 0) or ModelConfig.max_seq_len
            batch.chop_into_sequences(int(max_seq_len))
        if self.writer is not None and self.spec.output.postprocessed:
            self.writer.write(batch)
        if self.callbacks is not None:
            self.callbacks.on_sample_end(batch=batch, worker_index=self.worker_index)
        return batch

    def _timeout_message(self) -> str:
        where = "nowhere" if self.address is None else "{}:{}".format(*self.address)
        return (
            f"input 'external': no client ended an episode within {self.wait_s:g} s "
            f"({WAIT_FRACTION:g} of sample_timeout_s={self.sample_timeout_s:g}; evaluator "
            f"{self.worker_index}, listening on "
            f"{where}; {len(self.episodes.live)} episodes open, {self.episodes.dropped} "
            "dropped idle): run PolicyClients against that address, or raise "
            "sample_timeout_s"
        )

    @locked
    def get_metrics(self) -> list[EpisodeRecord]:
        """Episodes ended since the last call (training-enabled or not)."""
        self._episodes.extend(self.core.pop_episodes())
        return super().get_metrics()

    # -- the acting policy --------------------------------------------------------------
    def _sync_acting(self) -> None:
        """The acting copy takes the policy's weights (call holding the lock)."""
        self.acting.set_weights(self.policy.get_weights())

    @locked
    def set_weights(self, weights: Any, global_vars: Any = None) -> None:
        """``PolicyEvaluator.set_weights``; clients are answered with them at once."""
        super().set_weights(weights, global_vars)
        self._sync_acting()

    @locked
    def set_global_vars(self, global_vars: Any) -> None:
        """``PolicyEvaluator.set_global_vars``, for the acting copy too (exploration
        schedules)."""
        super().set_global_vars(global_vars)
        self.acting.on_global_var_update(global_vars)

    @locked
    def restore(self, state: Any) -> None:
        """``PolicyEvaluator.restore``; clients are answered by the restored policy."""
        super().restore(state)
        self._sync_acting()

    # -- the policy's version (local inference mode) -----------------------------------
    @locked
    def policy_version(self) -> str:
        """A digest of the acting policy's weights and the observation filter: changes
        exactly when the policy that answers clients changes."""
        normalization = self.filters[DEFAULT_POLICY_ID].normalization() or ()
        filter_parts = dict(zip(("mean", "scale", "clip"), normalization, strict=False))
        return array_digest({"weights": self.acting.get_weights(), "filter": filter_parts})[:16]

    # -- the server's calls ------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """``GET /spec``: the spaces, who answers and the policy version."""
        return {
            "observation_space": space_to_json(self.policy.observation_space),
            "action_space": space_to_json(self.policy.action_space),
            "env": self.env_name,
            "worker_index": self.worker_index,
            "policy_version": self.policy_version(),
            "open_episodes": len(self.episodes.live),
        }

    def policy_model(self) -> tuple[bytes, dict[str, str]]:
        """``GET /policy``: the current policy as TorchScript (``hierl.export``: raw
        observations in, ``(actions, action_dist_inputs, vf_preds)`` out; exported once
        per version) and the headers a local-inference client needs: ``X-Policy-Version``,
        ``X-Policy-Input-Dtype``, ``X-Action-Distribution`` (the class whose
        ``action_dist_inputs`` the client samples from when exploring; ``greedy`` for
        policies that explore otherwise, e.g. DQN's epsilon) and ``X-Policy-Recurrent``.

        A local-inference client sends, with each step, the log-likelihood of its action
        under the distribution it sampled from (its possibly older copy of the policy):
        the rows' ``action_logp`` and ``action_dist_inputs`` are the behaviour policy's,
        as importance ratios (PPO, IMPALA) need.

        Raises:
            EpisodeError: 501, the policy cannot be exported (``ExportError``'s message),
                or it samples its own way (not from ``dist_class``) yet its rows carry an
                ``action_logp``, which the client then could not compute.
        """
        from hierl.export import ExportError, export_policy
        from hierl.torch_policy_graph import TorchPolicyGraph

        with self._holding():
            version = self.policy_version()
            if self._exported is None or self._exported[0] != version:
                try:
                    with tempfile.TemporaryDirectory() as directory:
                        exported = export_policy(
                            self.acting,
                            directory,
                            "torchscript",
                            normalization=self.filters[DEFAULT_POLICY_ID].normalization(),
                            metadata={"policy_version": version, "env": self.env_name},
                        )
                        data = Path(exported.model_path).read_bytes()
                except ExportError as e:
                    raise EpisodeError(501, f"local inference is not available: {e}") from e
                samples = type(self.acting).compute_actions is TorchPolicyGraph.compute_actions
                if not samples and SampleBatch.ACTION_LOGP in self._probe_extras():
                    raise EpisodeError(
                        501,
                        f"local inference is not available: {type(self.acting).__name__} "
                        "samples actions its own way (it overrides compute_actions) and "
                        "trains on their action_logp, which a client cannot compute: use "
                        "inference_mode='remote'",
                    )
                headers = {
                    "X-Policy-Version": version,
                    "X-Policy-Input-Dtype": exported.spec["inputs"][0]["dtype"],
                    "X-Action-Distribution": (
                        self.acting.dist_class.__name__ if samples else "greedy"
                    ),
                    "X-Policy-Recurrent": str(bool(self.policy.get_initial_state())).lower(),
                }
                self._exported = (version, data, headers)
            return self._exported[1], self._exported[2]

    def _probe_extras(self) -> dict[str, np.ndarray]:
        """The acting policy's per-step extras on one observation of the space."""
        raw = np.asarray(self.policy.observation_space.sample())[None]
        obs = self.filters[DEFAULT_POLICY_ID](self.preprocessor.transform(raw), update=False)
        state = [np.asarray(s)[None] for s in self.acting.get_initial_state()]
        return act(self.acting, obs, self.policy.action_space, state).extra

    def handle(
        self,
        command: str,
        episode_id: str | None,
        body: dict[str, Any],
        client: str | None = None,
    ) -> Any:
        """One client call (see ``hierl.evaluators.external.server`` for the routes).

        ``client`` names the caller (the ``X-Hierl-Client`` header a PolicyClient sends):
        with a token set, an episode is bound to the client that started it, and is
        unknown (404) to every other (all clients share the token, so the token alone
        cannot tell them apart).  Without a token anyone may call anything anyway.

        Raises:
            WireError: a missing or malformed field (HTTP 400, naming it).
            EpisodeError: an unknown episode (404), conflicting calls (409), too many
                episodes or a busy evaluator (503).
        """
        owner = client if self._bind_episodes else None
        if command == "events":
            return self._events(body, client)
        if command == "start":
            episode_id = body.get("episode_id")
            if episode_id is not None and not isinstance(episode_id, str):
                raise WireError(
                    "episode_id", f"expected a string or null, got {short_repr(episode_id)}"
                )
            if episode_id is not None and len(episode_id) > MAX_ID_CHARS:
                raise WireError(
                    "episode_id", f"{len(episode_id)} characters; at most {MAX_ID_CHARS}"
                )
            training = body.get("training_enabled", True)
            if not isinstance(training, bool):
                raise WireError(
                    "training_enabled", f"expected true or false, got {short_repr(training)}"
                )
            with self._holding():
                return {"episode_id": self.episodes.start(episode_id, training, owner)}
        if not isinstance(episode_id, str):
            raise WireError("episode_id", f"expected a string, got {short_repr(episode_id)}")
        reward = _number(body, "reward", required=command == "returns")
        if command == "action":
            obs = self._observation(body)
            request = ActionRequest(episode_id, obs, reward, client=owner)
            return {"action": encode(self._act(request))}
        if command == "log_action":
            obs = self._observation(body)
            space = self.policy.action_space
            if "action" not in body:
                raise WireError("action", f"missing; expected an action of {space}")
            action = decode_observations([body["action"]], space, field="action")
            behaviour = self._behaviour(body)
            with self._holding():
                self.episodes.log_action(episode_id, obs, action, reward, behaviour, owner)
            return {}
        info = body.get("info") or {}
        if not isinstance(info, dict):
            raise WireError("info", f"expected a JSON object, got {type(info).__name__}")
        if command == "returns":
            with self._holding():
                self.episodes.log_returns(episode_id, reward, info, owner)
            return {}
        if command == "end":
            obs = self._observation(body)
            truncated = body.get("truncated", False)
            if not isinstance(truncated, bool):
                raise WireError("truncated", f"expected true or false, got {short_repr(truncated)}")
            with self._holding():
                self.episodes.end(episode_id, obs, reward, truncated, info, owner)
            return {}
        raise EpisodeError(404, f"unknown command {short_repr(command)}")

    def _events(self, body: dict[str, Any], client: str | None) -> dict[str, Any]:
        """``POST /events``: several calls in order (a local-inference client's batch).

        Every call that can be applied is, whatever fails before it: the answer holds
        one result per call (a failed one as ``{"error", "status", "field"?}``) and
        ``failed``, the indices of the failed calls.  A batch sent again under the same
        ``batch_id`` (its answer was lost) is not applied again: it gets the first answer.
        """
        events = body.get("events")
        if not isinstance(events, list):
            raise WireError("events", "expected a list of calls {'command', 'episode_id', ...}")
        batch_id = body.get("batch_id")
        if batch_id is not None and not isinstance(batch_id, str):
            raise WireError("batch_id", f"expected a string or null, got {short_repr(batch_id)}")
        if batch_id is not None and len(batch_id) > MAX_ID_CHARS:
            raise WireError("batch_id", f"{len(batch_id)} characters; at most {MAX_ID_CHARS}")
        if batch_id is None:
            return self._apply_events(events, client)
        with self._batches_lock:
            known = self._batches.get(batch_id)
            if known is None:
                self._batches[batch_id] = batch = _EventBatch()
                while len(self._batches) > REMEMBERED_BATCHES:
                    self._batches.popitem(last=False)
        if known is not None:
            known.done.wait()
            return known.answer
        try:
            batch.answer = self._apply_events(events, client)
        finally:
            batch.done.set()
        return batch.answer

    def _apply_events(self, events: list[Any], client: str | None) -> dict[str, Any]:
        results: list[Any] = []
        failed: list[int] = []
        for i, event in enumerate(events):
            try:
                if not isinstance(event, dict) or event.get("command") in ("events", None):
                    raise WireError("event", "expected a call {'command', 'episode_id', ...}")
                command = event["command"]
                results.append(self.handle(command, event.get("episode_id"), event, client))
            except WireError as e:
                message = str(e).split(": ", 1)[-1]
                results.append({"error": message, "status": 400, "field": e.field})
                failed.append(i)
            except EpisodeError as e:
                results.append({"error": str(e), "status": e.status})
                failed.append(i)
            except Exception as e:  # one broken call must not lose the others
                logger.exception("input 'external': event %d of a batch failed", i)
                results.append({"error": f"{type(e).__name__}: {e}", "status": 500})
                failed.append(i)
        return {"results": results, "failed": failed}

    def _behaviour(self, body: dict[str, Any]) -> dict[str, np.ndarray] | None:
        """The optional behaviour policy's ``action_logp`` (and ``action_dist_inputs``)
        of a ``log_action`` (a local-inference client's own policy); None: not given."""
        if body.get(SampleBatch.ACTION_LOGP) is None:
            return None
        out = {SampleBatch.ACTION_LOGP: np.asarray([_number(body, SampleBatch.ACTION_LOGP)])}
        field = SampleBatch.ACTION_DIST_INPUTS
        inputs = body.get(field)
        if inputs is not None:
            if self._extra_sizes is None:
                with self._holding():
                    self._extra_sizes = {k: v[0].size for k, v in self._probe_extras().items()}
            array = decode_floats(inputs, field, self._extra_sizes.get(field), np.float32)
            out[field] = array[None]
        return out

    def _observation(self, body: dict[str, Any]) -> np.ndarray:
        space = self.policy.observation_space
        if "observation" not in body:
            raise WireError("observation", f"missing; expected an observation of {space}")
        return decode_observations([body["observation"]], space, field="observation")

    def _act(self, request: ActionRequest) -> Any:
        """The policy's action for ``request``; requests that arrive while the policy is
        busy are computed together by whichever request holds the lock next.

        Raises:
            EpisodeError: 503 when learning held the lock past the episode timeout and
                no other request took this one (its step is not opened: retry it).
        """
        with self._pending_lock:
            self._pending.append(request)
        if self._lock.acquire(timeout=self.settings.episode_timeout_s):
            try:
                with self._pending_lock:
                    batch, self._pending = self._pending, []
                if batch:
                    self._act_batch(batch)
            finally:
                self._lock.release()
        else:
            with self._pending_lock:
                if any(r is request for r in self._pending):
                    self._pending.remove(request)
                    raise EpisodeError(503, "the evaluator is busy (learning); retry later")
        # CRUCIAL: another request may have taken this one into its batch: its step is
        # opened, so the answer must come (a 503 would make the client add it again).
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.action

    def _act_batch(self, batch: list[ActionRequest]) -> None:
        """The actions of ``batch`` (call holding the lock); every request is done after."""
        try:
            self.episodes.act(batch)
        except Exception as e:
            logger.exception("input 'external': computing %d actions failed", len(batch))
            for r in batch:
                if r.action is None and r.error is None:
                    r.error = EpisodeError(500, f"{type(e).__name__}: {e}")
        finally:
            for r in batch:
                r.done.set()

    @contextlib.contextmanager
    def _holding(self) -> Iterator[None]:
        """The evaluator's lock, or 503 when learning holds it past the episode timeout."""
        if not self._lock.acquire(timeout=self.settings.episode_timeout_s):
            raise EpisodeError(503, "the evaluator is busy (learning); retry later")
        try:
            yield
        finally:
            self._lock.release()

    def stop(self) -> None:
        """Stop the server, then as ``PolicyEvaluator.stop``."""
        if self.server is not None:
            self.server.close()
            self.server = None
        super().stop()


class _EventBatch:
    """A ``POST /events`` batch by its id: its answer once applied."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: dict[str, Any] = {}


def _number(body: dict[str, Any], field: str, required: bool = False) -> float:
    """A reward or log-likelihood: stored in float32, so checked in float32."""
    return decode_number(body.get(field), field, np.float32, required)
