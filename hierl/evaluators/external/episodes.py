"""The episodes PolicyClients drive: one row per step, whole episodes out.

An external app owns the loop; the server sees, per episode, calls in this order:

    start  ->  (action | log_action, returns*)*  ->  end (final observation)

A step opens when an observation is acted on (``action``: the policy picks;
``log_action``: the app picked) and closes at the next observation of the episode (its
``NEW_OBS``), with the rewards logged in between (or sent along with that call).  Rows
are built exactly as ``VectorSampler`` builds them (OBS,
NEW_OBS, ACTIONS, REWARDS, TERMINATEDS, TRUNCATEDS, EPS_ID, T, the policy's extras and
recurrent ``state_in_*``), so every algorithm trains on them unchanged.

Only *ended* episodes become training rows: an episode that is never ended (the client
vanished) is dropped after ``episode_timeout_s`` without a call, with its steps.  The
table is not thread-safe: the owner (``
ExternalEvaluator``) calls it under its lock.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from hierl.evaluators.filters import NoFilter
from hierl.evaluators.rollout_core import EpisodeRecord, RolloutCore, act
from hierl.evaluators.wire import WireError, short_repr
from hierl.models.preprocessors import Preprocessor
from hierl.policy_graph import PolicyGraph
from hierl.sample_batch import SampleBatch


class EpisodeError(Exception):
    """A call that does not fit the episodes: ``status`` is its HTTP status (404 unknown
    episode, 409 conflicting calls, 503 too many open episodes)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _step_reward(episode: ExternalEpisode, reward: float) -> float:
    """The open step's reward with ``reward`` added, checked as it is stored (float32):
    two rewards finite in float32 may add up to one that is not.

    Raises:
        WireError: ``reward``, the sum is beyond float32.
    """
    total = episode.pending_reward + reward
    if not abs(total) <= FLOAT32_MAX:
        raise WireError(
            "reward",
            f"the step's rewards add up to {total:g}, which does not fit float32, the dtype "
            f"rewards are stored in (|x| <= {FLOAT32_MAX:.4g})",
        )
    return total


def from_env_action(space: gym.Space, action: np.ndarray) -> np.ndarray:
    """Inverse of ``to_env_action`` for actions an app chose: Discrete and MultiDiscrete
    values shifted back by the space's ``start``; others unchanged."""
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return np.asarray(action, dtype=np.int64) - np.asarray(space.start, dtype=np.int64)
    return np.asarray(action)


@dataclasses.dataclass(eq=False)  # compared by identity (they hold arrays)
class ActionRequest:
    """One ``action`` call waiting for the policy (batched across clients)."""

    episode_id: str
    observation: np.ndarray
    """The raw observation, a batch of one row in the env's layout."""
    reward: float = 0.0
    """Reward of the previous step sent along with this call."""
    client: str | None = None
    """Who calls (see ``ExternalEpisodes.episode``)."""
    action: Any = None
    """The env action, once computed."""
    error: EpisodeError | WireError | None = None
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    """Set once ``action`` or ``error`` is (by whichever request computed the batch)."""


class ExternalEpisode:
    """The steps of one episode so far."""

    def __init__(
        self,
        client_id: str,
        eps_id: int,
        slot: int,
        training_enabled: bool,
        owner: str | None = None,
    ):
        self.client_id = client_id
        self.owner = owner
        """The client that started it (None: any caller may continue it)."""
        self.eps_id = eps_id
        self.slot = slot
        self.training_enabled = training_enabled
        self.last_seen = time.monotonic()
        self.started = False  # the callbacks' episode (at its first observation)
        self.obs: list[np.ndarray] = []
        self.new_obs: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []
        self.extra: dict[str, list[np.ndarray]] = {}
        self.state_in: list[list[np.ndarray]] = []
        self.rewards: list[float] = []
        self.state: list[np.ndarray] = []
        self.open = False  # a step acted on, waiting for its next observation
        self.pending_reward = 0.0
        self.total_reward = 0.0
        self.info: dict[str, Any] = {}

    @property
    def length(self) -> int:
        """Steps closed so far."""
        return len(self.rewards)


class ExternalEpisodes:
    """The table of open episodes of one evaluator and the ended ones not yet sampled.

    Args:
        policy: the policy that acts and whose extras the rows carry.
        preprocessor, obs_filter: applied to every observation as the sampler does (each
            observation acted on is recorded by the filter once; final ones are not).
        core: episode ids, callbacks and episode records (the evaluator's metrics).
        explore: whether episodes with ``training_enabled`` sample actions (False:
            greedy everywhere); episodes without it act greedily.
        clip_rewards: clip the rows' rewards to ``[-c, c]`` (metrics stay unclipped).
        episode_timeout_s: idle time after which ``drop_idle`` drops an episode.
        max_episodes: open episodes allowed at once.
        max_episode_steps: steps one episode may hold (a call opening one more: 413).
        max_info_bytes: JSON size of one episode's merged ``info`` (more: 413).
        on_finished: called after an episode ended with training rows.
    """

    def __init__(
        self,
        policy: PolicyGraph,
        preprocessor: Preprocessor,
        obs_filter: NoFilter,
        core: RolloutCore,
        *,
        explore: bool = True,
        clip_rewards: float | None = None,
        episode_timeout_s: float = 60.0,
        max_episodes: int = 10_000,
        max_episode_steps: int = 100_000,
        max_info_bytes: int = 65_536,
        on_finished: Callable[[], None] | None = None,
    ):
        self.policy = policy
        self.preprocessor = preprocessor
        self.filter = obs_filter
        self.core = core
        self.explore = explore
        self.clip_rewards = clip_rewards
        self.episode_timeout_s = episode_timeout_s
        self.max_episodes = max_episodes
        self.max_episode_steps = max_episode_steps
        self.max_info_bytes = max_info_bytes
        self.on_finished = on_finished
        self.live: dict[str, ExternalEpisode] = {}
        self.finished: list[SampleBatch] = []
        self.finished_rows = 0
        self.dropped = 0
        """Episodes dropped unfinished (idle past ``episode_timeout_s``)."""
        self.initial_state = [np.asarray(s)[None] for s in policy.get_initial_state()]
        self._free_slots: list[int] = []
        self._next_slot = 0

    # -- calls ------------------------------------------------------------------------
    def start(
        self,
        episode_id: str | None = None,
        training_enabled: bool = True,
        client: str | None = None,
    ) -> str:
        """Open an episode (``episode_id`` None: a new random id); returns its id.  With
        ``client``, only calls by that client reach it (``episode``)."""
        client_id = uuid.uuid4().hex if episode_id is None else str(episode_id)
        if client_id in self.live:
            raise EpisodeError(409, f"episode {short_repr(client_id)} is already running")
        if len(self.live) >= self.max_episodes:
            self.drop_idle()
            if len(self.live) >= self.max_episodes:
                raise EpisodeError(
                    503, f"{len(self.live)} episodes are open (input_external.max_episodes)"
                )
        slot = heapq.heappop(self._free_slots) if self._free_slots else self._next_slot
        self._next_slot = max(self._next_slot, slot + 1)
        episode = ExternalEpisode(
            client_id, self.core.new_episode_id(), slot, training_enabled, owner=client
        )
        episode.state = [s.copy() for s in self.initial_state]
        self.live[client_id] = episode
        return client_id

    def act(self, requests: list[ActionRequest]) -> None:
        """The policy's actions for ``requests`` (one ``compute_actions`` per exploration
        setting); each request gets its ``action`` or its ``error``."""
        ready: list[tuple[ActionRequest, ExternalEpisode, np.ndarray]] = []
        seen: set[str] = set()
        for request in requests:
            try:
                if request.episode_id in seen:
                    raise EpisodeError(
                        409, f"episode {short_repr(request.episode_id)}: concurrent calls"
                    )
                episode = self.episode(request.episode_id, request.client)
                seen.add(request.episode_id)
                self._check_steps(episode)
                obs = self._observe(episode, request.observation, request.reward)
                ready.append((request, episode, obs))
            except (EpisodeError, WireError) as e:
                request.error = e
        for explore in (True, False):
            group = [r for r in ready if self._explores(r[1]) == explore]
            if not group:
                continue
            obs = np.concatenate([o for _, _, o in group])
            state = [np.concatenate(s) for s in zip(*(e.state for _, e, _ in group), strict=True)]
            acted = act(
                self.policy, obs, self.policy.action_space, state, None if explore else False
            )
            for j, (request, episode, _) in enumerate(group):
                extra = {k: v[j] for k, v in acted.extra.items()}
                state_out = [s[j : j + 1] for s in acted.state_out]
                self._open_step(episode, obs[j], acted.actions[j], extra, state_out)
                request.action = acted.env_actions[j]

    def log_action(
        self,
        episode_id: str,
        observation: np.ndarray,
        action: np.ndarray,
        reward: float = 0.0,
        behaviour: dict[str, np.ndarray] | None = None,
        client: str | None = None,
    ) -> None:
        """The app acted itself: record ``action`` (env format, one row) on
        ``observation``.

        Its ``action_logp`` (and ``action_dist_inputs``) are those of the policy that
        chose it when ``behaviour`` gives them (one row each, of the sizes of the
        policy's own: a local-inference client's, possibly older, policy), else the
        current policy's.  ``vf_preds`` are always the current policy's: they are GAE's
        baseline and the value-clipping reference, which want the value function being
        trained, not the one the client acted with.
        """
        episode = self.episode(episode_id, client)
        self._check_steps(episode)
        obs = self._observe(episode, observation, reward)
        acted = act(self.policy, obs, self.policy.action_space, episode.state, None)
        policy_action = from_env_action(self.policy.action_space, action)
        actions = policy_action.astype(acted.actions.dtype).reshape(acted.actions.shape)
        extra = dict(acted.extra)
        if SampleBatch.ACTION_LOGP in extra:
            columns = {SampleBatch.OBS: obs, SampleBatch.ACTIONS: actions}
            if episode.state:
                columns[SampleBatch.SEQ_LENS] = np.ones(1, dtype=np.int32)
                for i, s in enumerate(episode.state):
                    columns[SampleBatch.STATE_IN + str(i)] = s
            logp = self.policy.compute_log_likelihoods(SampleBatch(columns))
            extra[SampleBatch.ACTION_LOGP] = logp.astype(extra[SampleBatch.ACTION_LOGP].dtype)
        for key, value in (behaviour or {}).items():
            if key in extra:  # CRUCIAL: the behaviour policy's, for importance ratios
                extra[key] = value.reshape(extra[key].shape).astype(extra[key].dtype)
        state_out = acted.state_out
        self._open_step(episode, obs[0], actions[0], {k: v[0] for k, v in extra.items()}, state_out)

    def log_returns(
        self,
        episode_id: str,
        reward: float,
        info: dict[str, Any] | None = None,
        client: str | None = None,
    ) -> None:
        """Add ``reward`` to the episode's current step; ``info`` updates the info the
        callbacks' ``on_episode_end`` sees."""
        episode = self.episode(episode_id, client)
        total = _step_reward(episode, reward)
        merged = self._merged_info(episode, info)
        episode.pending_reward = total
        episode.info = merged

    def end(
        self,
        episode_id: str,
        observation: np.ndarray,
        reward: float = 0.0,
        truncated: bool = False,
        info: dict[str, Any] | None = None,
        client: str | None = None,
    ) -> None:
        """The episode ended at ``observation`` (terminated, or ``truncated``: a time
        limit, so its last value is bootstrapped); its rows become trainable."""
        episode = self.episode(episode_id, client)
        _step_reward(episode, reward)  # refused before the episode is touched
        merged = self._merged_info(episode, info)
        del self.live[episode_id]
        self._free_slot(episode)
        if episode.open:
            flat = self.preprocessor.transform(observation)
            # the final observation is normalised but not recorded (as in the sampler)
            self._close_step(episode, self.filter(flat, update=False)[0], reward)
        else:
            episode.pending_reward += reward
        if not episode.length:
            if episode.started:  # callbacks: the episode ends with no steps
                self.core.live.pop(episode.slot, None)
            return
        record = EpisodeRecord(episode.total_reward, episode.length, episode.slot)
        self.core.end_episode(record, merged, observation[0])
        if episode.training_enabled:
            self.finished.append(self._rows(episode, terminated=not truncated))
            self.finished_rows += episode.length
            if self.on_finished is not None:
                self.on_finished()

    def drop_idle(self, now: float | None = None) -> int:
        """Drop the episodes without a call for ``episode_timeout_s``; returns how many."""
        now = time.monotonic() if now is None else now
        idle = [e for e in self.live.values() if now - e.last_seen > self.episode_timeout_s]
        for episode in idle:
            del self.live[episode.client_id]
            self._free_slot(episode)
            self.core.live.pop(episode.slot, None)
        self.dropped += len(idle)
        return len(idle)

    def take_finished(self) -> list[SampleBatch]:
        """The rows of the episodes ended since the last call, one batch per episode."""
        out, self.finished, self.finished_rows = self.finished, [], 0
        return out

    def episode(self, episode_id: str, client: str | None = None) -> ExternalEpisode:
        """The open episode ``episode_id`` (its last call is now), for ``client``.

        An episode started by a client (its ``owner``) answers that client only: to
        anyone else it does not exist (the same 404 as an unknown id, so that another
        client learns nothing of it).

        Raises:
            EpisodeError: 404, no such open episode (for this client).
        """
        episode = self.live.get(episode_id)
        if episode is not None and episode.owner is not None and client != episode.owner:
            episode = None
        if episode is None:
            raise EpisodeError(
                404,
                f"unknown episode {short_repr(episode_id)}: it was never started, has ended, "
                f"or was dropped after {self.episode_timeout_s:g} s without a call; "
                f"{len(self.live)} episodes are open",
            )
        episode.last_seen = time.monotonic()
        return episode

    # -- limits -----------------------------------------------------------------------
    def _check_steps(self, episode: ExternalEpisode) -> None:
        """413 when one more step would pass ``max_episode_steps``."""
        if episode.length + episode.open >= self.max_episode_steps:
            raise EpisodeError(
                413,
                f"episode {short_repr(episode.client_id)} holds {self.max_episode_steps} "
                "steps (input_external.max_episode_steps): end it (truncated) and start "
                "another",
            )

    def _merged_info(self, episode: ExternalEpisode, info: dict[str, Any] | None) -> dict[str, Any]:
        """The episode's info updated with ``info``; 413 when its JSON passes
        ``max_info_bytes`` (the episode keeps its info)."""
        if not info:
            return episode.info
        merged = {**episode.info, **info}
        try:
            size = len(json.dumps(merged, default=repr))
        except RecursionError:
            raise WireError("info", "nested too deeply") from None
        if size > self.max_info_bytes:
            raise EpisodeError(
                413,
                f"info: the episode's info would hold {size} bytes of JSON; at most "
                f"{self.max_info_bytes} (input_external.max_info_bytes)",
            )
        return merged

    # -- steps ------------------------------------------------------------------------
    def _explores(self, episode: ExternalEpisode) -> bool:
        return self.explore and episode.training_enabled

    def _observe(self, episode: ExternalEpisode, raw: np.ndarray, reward: float) -> np.ndarray:
        """The filtered observation (one row) to act on; closes the open step with it."""
        _step_reward(episode, reward)  # refused before the filter records the observation
        flat = self.preprocessor.transform(raw)
        obs = np.array(self.filter(flat), copy=True)
        if episode.open:
            self._close_step(episode, obs[0], reward)
        else:
            episode.pending_reward += reward
        if not episode.started:
            episode.started = True
            self.core.start_episode(episode.slot, episode.eps_id, raw[0], {})
        return obs

    def _open_step(
        self,
        episode: ExternalEpisode,
        obs: np.ndarray,
        action: np.ndarray,
        extra: dict[str, np.ndarray],
        state_out: list[np.ndarray],
    ) -> None:
        episode.obs.append(obs)
        episode.actions.append(np.asarray(action))
        for k, v in extra.items():
            episode.extra.setdefault(k, []).append(np.asarray(v))
        if episode.state:
            episode.state_in.append([s[0] for s in episode.state])
            episode.state = [np.array(s, copy=True) for s in state_out]
        episode.open = True

    def _close_step(self, episode: ExternalEpisode, new_obs: np.ndarray, reward: float) -> None:
        total = episode.pending_reward + reward
        episode.pending_reward = 0.0
        episode.new_obs.append(new_obs)
        episode.rewards.append(total)
        episode.total_reward += total
        episode.open = False
        if self.core.step_hook:
            self.core.step_episode(episode.slot, total, new_obs, {}, episode.actions[-1])

    def _rows(self, episode: ExternalEpisode, terminated: bool) -> SampleBatch:
        """The episode's rows in the sampler's columns and dtypes."""
        n = episode.length
        rewards = np.asarray(episode.rewards, dtype=np.float32)
        if self.clip_rewards:
            np.clip(rewards, -self.clip_rewards, self.clip_rewards, out=rewards)
        ends = np.zeros(n, dtype=bool)
        ends[-1] = True
        columns = {
            SampleBatch.OBS: np.stack(episode.obs),
            SampleBatch.NEW_OBS: np.stack(episode.new_obs),
            SampleBatch.ACTIONS: np.stack(episode.actions),
            SampleBatch.REWARDS: rewards,
            SampleBatch.TERMINATEDS: ends if terminated else np.zeros(n, dtype=bool),
            SampleBatch.TRUNCATEDS: np.zeros(n, dtype=bool) if terminated else ends,
            SampleBatch.EPS_ID: np.full(n, episode.eps_id, dtype=np.int64),
            SampleBatch.T: np.arange(n, dtype=np.int64),
            **{k: np.stack(v) for k, v in episode.extra.items()},
        }
        for i in range(len(episode.state)):
            columns[SampleBatch.STATE_IN + str(i)] = np.stack([s[i] for s in episode.state_in])
        return SampleBatch(columns)

    def _free_slot(self, episode: ExternalEpisode) -> None:
        heapq.heappush(self._free_slots, episode.slot)
