"""The rollout core: the one per-step loop behind every way hierl plays an env.

Whatever plays an env (a PolicyEvaluator's sampler, an ES perturbation, ``hierl
rollout``), each step is the same:

    actions = act(policy, observations[, state])     # compute_actions, env format
    obs, rewards, terminated, truncated, info = call_env(env, "step", actions)
    record (preprocess, filter, rows, episode return and length)
    for every episode that ended: end_episode(record, info)   # callbacks, then metrics
    (for every episode that began: start_episode(...); with a step hook: step_episode)

This module holds what does not depend on how the rows are laid out:

* ``RolloutCore``: env calls (an exception becomes an ``EnvError`` naming the
  env, the evaluator, the sub-env and the step count), episode ids, the user's callbacks
  (``hierl.evaluators.callbacks``: the live ``Episode`` of every sub-env, its
  start, steps and end, trajectories and samples), the end of an episode (callbacks,
  then its ``EpisodeRecord`` in the metrics) and ``RolloutCore.pop_episodes``;
* ``act``, the *act* step, and ``batch_obs``;
* ``FragmentSampler``: a core that returns fragments of ``rollout_fragment_length``
  steps per env (``batch_mode``, reward clipping).  Its loops are
  ``VectorSampler`` (single-agent vector envs, array code
  over the env vector) and ``MultiAgentSampler``
  (MultiAgentEnv copies, one row per agent);
* ``EpisodePlayer``: a core over one ``gymnasium.Env`` that plays one whole episode
  per call (ES's perturbations, ``hierl rollout``);
* ``make_episode_env``: an env an ``EpisodePlayer`` can play (its kind checked).

Env kinds are the extension point for a new kind of env: each is one registration in
``hierl.evaluators.env_kinds`` (its ``FragmentSampler``, its spaces, its state);
a new kind's sampler builds on this module (its per-step loop calls ``act``,
``RolloutCore.call_env`` and ``RolloutCore.end_episode``; its
``from_evaluator`` builds it), and PolicyEvaluator, ES and ``hierl rollout`` need no
change.

Observation filters: every loop records an observation in the filter's statistics once,
when it is acted on (or, at the end of a fragment, will be); an episode's final
observation is normalised but never recorded (see ``hierl.evaluators.sampler``).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import concatenate, create_empty_array

from hierl.evaluators.atari import LIFE_LOSS
from hierl.evaluators.callbacks import Episode, EpisodeCallbacks, overrides
from hierl.evaluators.env import EnvContext, EnvCreator, EnvError
from hierl.evaluators.env_kinds import EnvKindError, env_kind
from hierl.evaluators.filters import NoFilter
from hierl.models.preprocessors import Preprocessor, to_env_action
from hierl.policy_graph import FrozenActor, PolicyGraph
from hierl.sample_batch import MultiAgentBatch, SampleBatch

if TYPE_CHECKING:
    from hierl.evaluators.policy_evaluator import PolicyEvaluator

BATCH_MODES = ("truncate_episodes", "complete_episodes")
"""The values of ``batch_mode``."""


# -- episodes ------------------------------------------------------------------------------
@dataclasses.dataclass
class EpisodeRecord:
    """Summary of one finished episode."""

    episode_reward: float
    episode_length: int
    env_index: int
    custom_metrics: dict[str, float] = dataclasses.field(default_factory=dict)


def game_results(
    info: Mapping[str, Any], idx: np.ndarray, returns: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What to report of the episodes of sub-envs ``idx`` that just ended.

    ``info`` is the vector env's info of their last step (Gymnasium's layout: ``key`` and
    its ``_key`` mask); ``returns`` and ``lengths`` are the loop's own sums.  An end whose
    info says ``life_loss`` (``hierl.evaluators.atari.EpisodicLife``) only cuts the
    training episode: it is not reported.  An end whose info has ``episode``
    (``gymnasium.wrappers.RecordEpisodeStatistics``, e.g. below reward-changing or
    episodic-life wrappers) is reported with that whole game's return and length.

    Returns:
        ``(returns, lengths, idx)`` of the episodes to report.
    """

    def entry(key: str) -> tuple[Any, np.ndarray] | None:
        value = info.get(key)
        if value is None:
            return None
        mask = info.get("_" + key)
        return value, np.ones(len(idx), bool) if mask is None else np.asarray(mask)[idx]

    life = entry(LIFE_LOSS)
    stats = entry("episode")
    if stats is not None:
        (episode, has) = stats
        returns = np.where(has, np.asarray(episode["r"], np.float64)[idx], returns)
        lengths = np.where(has, np.asarray(episode["l"], np.int64)[idx], lengths)
    if life is None:
        return returns, lengths, idx
    keep = ~(np.asarray(life[0], bool)[idx] & life[1])
    return returns[keep], lengths[keep], idx[keep]


def batch_obs(space: gym.Space, items: list[Any]) -> Any:
    """Stack single observations into Gymnasium's batched layout for ``space``."""
    if isinstance(space, gym.spaces.Box):
        return np.stack(items)
    return concatenate(space, items, create_empty_array(space, len(items)))


class Actions(NamedTuple):
    """What ``act`` returns for a batch of observations."""

    actions: np.ndarray
    """As the policy sampled them (what the training batch records)."""
    env_actions: Any
    """The same, mapped onto the action space (clipped, shifted) for the env."""
    state_out: list[np.ndarray]
    """The recurrent state after this step (``[]`` for feed-forward policies)."""
    extra: dict[str, np.ndarray]
    """Per-row outputs of the policy (log-probabilities, value predictions...)."""


def act(
    policy: PolicyGraph,
    obs: np.ndarray,
    action_space: gym.Space,
    state: list[np.ndarray] | None = None,
    explore: bool | None = None,
) -> Actions:
    """The *act* step: ``policy.compute_actions`` on a batch of (filtered) observations.

    ``state``: the recurrent state per row (None or ``[]``: a feed-forward policy);
    ``explore`` None leaves the policy's default (sampling).
    """
    kwargs = {} if explore is None else {"explore": explore}
    if state:
        actions, state_out, extra = policy.compute_actions(obs, state, **kwargs)
    else:
        actions, state_out, extra = policy.compute_actions(obs, **kwargs)
    return Actions(actions, to_env_action(action_space, actions), state_out, extra)


class RolloutCore:
    """What every rollout loop shares: env calls, episode ids and the end of an episode.

    Args:
        env_id: the env's id or creator name (error messages).
        worker_index: the evaluator's index (0: the driver's local evaluator); episode
            ids start at ``worker_index << 40`` so that they are unique across evaluators.
        callbacks: the user's hooks (``hierl.evaluators.callbacks``); None costs
            nothing per step or per episode.

    Attributes:
        env_steps: steps taken by ``call_env(..., "step")`` so far (an ``EnvError`` says it).
        step_hook: whether the callbacks override ``on_episode_step`` (only then do loops
            call ``step_episode``).
        live: with callbacks, the ``Episode`` of every sub-env (by env index) between
            its ``start_episode`` and its end.
    """

    def __init__(
        self,
        *,
        env_id: str = "env",
        worker_index: int = 0,
        callbacks: EpisodeCallbacks | None = None,
    ):
        self.env_id = env_id
        self.worker_index = worker_index
        self.callbacks = callbacks
        self.step_hook = overrides(callbacks, "on_episode_step")
        self.trajectory_hook = overrides(callbacks, "on_postprocess_trajectory")
        """Whether the callbacks look at each trajectory (the loops split batches for it)."""
        self.live: dict[int, Episode] = {}
        self.env_steps = 0
        self._eps_counter = itertools.count(worker_index << 40)
        self.completed: list[EpisodeRecord] = []
        self._finished: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def call_env(
        self, env: Any, method: str, *args: Any, sub_env: int | None = None, **kwargs: Any
    ) -> Any:
        """``env.method(*args, **kwargs)``; an exception becomes an ``EnvError``
        (``sub_env`` None: found in the traceback of a ``SyncVectorEnv``)."""
        try:
            out = getattr(env, method)(*args, **kwargs)
        except Exception as e:
            raise EnvError.wrap(
                e,
                env_id=self.env_id,
                worker_index=self.worker_index,
                method=method,
                env_steps=self.env_steps,
                sub_env=sub_env,
            ) from e
        self.env_steps += method == "step"
        return out

    def new_episode_id(self) -> int:
        """A fresh episode id."""
        return next(self._eps_counter)

    def new_episode_ids(self, n: int) -> np.ndarray:
        """``n`` fresh episode ids (int64), vectorised (thousands of sub-envs)."""
        start = next(self._eps_counter)
        self._eps_counter = itertools.count(start + n)
        return np.arange(start, start + n)

    def start_episode(
        self, env_index: int, episode_id: int, observation: Any, info: Mapping[str, Any]
    ) -> None:
        """Sub-env ``env_index`` began an episode with ``observation`` (callbacks only)."""
        if self.callbacks is None:
            return
        episode = Episode(episode_id, env_index, last_observation=observation)
        episode.last_info = dict(info)
        self.live[env_index] = episode
        self.callbacks.on_episode_start(episode=episode, worker_index=self.worker_index)

    def step_episode(
        self,
        env_index: int,
        reward: float,
        observation: Any,
        info: Mapping[str, Any],
        action: Any,
    ) -> Episode:
        """Sub-env ``env_index`` took a step: update its episode, run ``on_episode_step``
        (loops call this only when ``step_hook`` is set); returns the episode."""
        episode = self.live[env_index]
        episode.episode_reward += reward
        episode.episode_length += 1
        episode.last_observation, episode.last_info = observation, dict(info)
        episode.last_action = action
        self.callbacks.on_episode_step(episode=episode, worker_index=self.worker_index)
        return episode

    def end_episode(
        self, record: EpisodeRecord, env_info: dict[str, Any], observation: Any = None
    ) -> None:
        """An episode ended: run the callbacks on it, then keep it for the metrics.

        ``observation`` is the env's final observation (None: the one the last
        ``step_episode`` recorded); the callbacks' custom metrics go into ``record``.
        """
        if self.callbacks is not None:
            episode = self.live.pop(record.env_index)
            episode.episode_reward = record.episode_reward
            episode.episode_length = record.episode_length
            if observation is not None:
                episode.last_observation = observation
            episode.last_info = env_info
            self.callbacks.on_episode_end(
                episode=episode, env_info=env_info, worker_index=self.worker_index
            )
            record.custom_metrics = episode.custom_metrics
        self.completed.append(record)

    def end_episodes(
        self,
        returns: np.ndarray,
        lengths: np.ndarray,
        env_indices: np.ndarray,
        env_info: Callable[[int], dict[str, Any]],
        observation: Callable[[int], Any] | None = None,
    ) -> None:
        """Several sub-envs' episodes ended at once (``env_info(i)``, ``observation(i)``:
        sub-env ``i``'s info and final observation, asked for only with callbacks).

        Without callbacks the records are only built in ``pop_episodes`` (no Python
        object per episode here); the arrays must not be changed afterwards.
        """
        if self.callbacks is None:
            self._finished.append((returns, lengths, env_indices))
            return
        for r, n, i in zip(returns.tolist(), lengths.tolist(), env_indices.tolist(), strict=True):
            final = None if observation is None else observation(i)
            self.end_episode(EpisodeRecord(r, n, i), env_info(i), final)

    def postprocessed(
        self,
        batch: SampleBatch,
        policy_id: str,
        policy: PolicyGraph,
        agent_id: Any = None,
        other_agent_batches: dict[Any, tuple[str, SampleBatch]] | None = None,
    ) -> None:
        """Run ``on_postprocess_trajectory`` on one postprocessed trajectory (if set)."""
        if self.callbacks is not None:
            self.callbacks.on_postprocess_trajectory(
                batch=batch,
                policy_id=policy_id,
                policy=policy,
                agent_id=agent_id,
                other_agent_batches=other_agent_batches,
                worker_index=self.worker_index,
            )

    def pop_episodes(self) -> list[EpisodeRecord]:
        """Return and forget the episodes finished since the last call."""
        out, self.completed = self.completed, []
        for returns, lengths, envs in self._finished:
            out.extend(
                EpisodeRecord(r, n, i)
                for r, n, i in zip(returns.tolist(), lengths.tolist(), envs.tolist(), strict=True)
            )
        self._finished = []
        return out


@dataclasses.dataclass(frozen=True)
class RolloutSettings:
    """What every ``FragmentSampler`` is told besides its envs and policies."""

    rollout_fragment_length: int
    """Steps of every env copy per ``sample()`` (see ``FragmentSampler``)."""
    batch_mode: str = "truncate_episodes"
    """``truncate_episodes`` (fragments) or ``complete_episodes`` (whole episodes)."""
    clip_rewards: float | None = None
    """Clip the batch's rewards to ``[-c, c]`` (the episode metrics stay unclipped)."""
    explore: bool = True
    """Sample actions; False: the policy's greedy actions (evaluation)."""
    seed: int | None = None
    """The first reset's seed (env copy ``j`` of a MultiAgentSampler: ``seed + j``)."""
    worker_index: int = 0
    """The evaluator's index (see ``RolloutCore``)."""
    env_id: str = "env"
    """The env's id or creator name (error messages)."""
    callbacks: EpisodeCallbacks | None = None
    """The user's hooks (``hierl.evaluators.callbacks``)."""

    def __post_init__(self) -> None:
        if self.batch_mode not in BATCH_MODES:
            raise ValueError(
                f"batch_mode '{self.batch_mode}' is invalid; valid: {', '.join(BATCH_MODES)}"
            )


class FragmentSampler(RolloutCore):
    """A rollout loop that returns fragments of experience for a PolicyEvaluator.

    ``sample()`` returns, with ``batch_mode="truncate_episodes"``,
    ``rollout_fragment_length`` steps of every one of ``num_envs`` env copies; with
    ``"complete_episodes"`` only whole episodes, at least that many steps (subclasses say
    how they count).  See ``RolloutSettings`` for the settings.

    Subclasses implement ``_sample_fragment``, ``_sample_episodes``, ``close`` and the
    ``from_evaluator`` constructor that ``PolicyEvaluator.sampler`` calls for their
    ``EnvKind``.
    """

    resumable: ClassVar[bool] = False
    """Whether ``hierl.evaluators.env_state`` can snapshot this loop (exact resume)."""

    def __init__(self, num_envs: int, settings: RolloutSettings):
        super().__init__(
            env_id=settings.env_id, worker_index=settings.worker_index, callbacks=settings.callbacks
        )
        self.settings = settings
        self.num_envs = num_envs
        self.fragment_length = int(settings.rollout_fragment_length)
        self.batch_mode = settings.batch_mode
        self.clip_rewards = settings.clip_rewards
        # None keeps the policy's default (sampling), so policies without the argument work
        self.explore: bool | None = None if settings.explore else False
        self.steps_sampled = 0
        self.raw_batches: list[tuple[str, SampleBatch]] | None = None
        """When a list (``output_postprocessed=False``), each sample's rows before
        postprocessing are appended as ``(policy_id, batch)``."""

    @classmethod
    def from_evaluator(cls, evaluator: PolicyEvaluator) -> FragmentSampler:
        """The loop for ``evaluator``: its envs (created here), policies and settings."""
        raise NotImplementedError

    def sample(self) -> SampleBatch | MultiAgentBatch:
        """Collect and postprocess one batch (see the class docstring for its size)."""
        if self.batch_mode == "truncate_episodes":
            batch = self._sample_fragment()
        else:
            batch = self._sample_episodes(self.fragment_length * self.num_envs)
        if self.callbacks is not None:
            self.callbacks.on_sample_end(batch=batch, worker_index=self.worker_index)
        return batch

    def _sample_fragment(self) -> SampleBatch | MultiAgentBatch:
        raise NotImplementedError

    def _sample_episodes(self, min_steps: int) -> SampleBatch | MultiAgentBatch:
        raise NotImplementedError

    def clip(self, rewards: np.ndarray) -> np.ndarray:
        """``rewards`` (a float array) clipped in place to ``[-clip_rewards, clip_rewards]``."""
        if self.clip_rewards:
            np.clip(rewards, -self.clip_rewards, self.clip_rewards, out=rewards)
        return rewards

    def close(self) -> None:
        """Close the envs."""
        raise NotImplementedError


# -- whole episodes of one env -------------------------------------------------------------
@dataclasses.dataclass
class PlayedEpisode:
    """One episode played by ``EpisodePlayer.play``."""

    record: EpisodeRecord
    """Its return, length and custom metrics (set by the callbacks)."""
    observations: np.ndarray | None
    """The preprocessed, unfiltered observations acted on (``record_observations``)."""
    last_info: dict[str, Any]
    """The env's info dict of the last step."""
    ended: bool = True
    """Whether the episode ended (False: ``max_steps`` cut it short)."""


class EpisodePlayer(RolloutCore):
    """Plays whole episodes of one ``gymnasium.Env`` with one policy: ES perturbations
    and ``hierl rollout``.

    Observations are preprocessed and normalised by ``obs_filter`` *without* recording
    them (the caller decides what the filter learns from an episode); recurrent policies
    carry their state through the episode.  Feed-forward policies that are a
    ``FrozenActor`` (ES's) act through the function it returns for the episode, which
    gives ``act``'s env action bit for bit without its generic per-step layers.  See
    ``PolicyEvaluator.episode_player``.
    """

    def __init__(
        self,
        env: gym.Env,
        policy: PolicyGraph,
        preprocessor: Preprocessor,
        obs_filter: NoFilter,
        *,
        env_id: str = "env",
        worker_index: int = 0,
        callbacks: EpisodeCallbacks | None = None,
    ):
        super().__init__(env_id=env_id, worker_index=worker_index, callbacks=callbacks)
        check_plays_episodes(env, env_id)
        self.env = env
        self.policy = policy
        self.preprocessor = preprocessor
        self.filter = obs_filter
        self._has_frozen_actor = isinstance(policy, FrozenActor)  # once: a slow check

    def play(
        self,
        *,
        seed: int | None = None,
        explore: bool = False,
        max_steps: int = -1,
        record_observations: bool = False,
    ) -> PlayedEpisode:
        """Reset with ``seed`` and play until the episode ends or ``max_steps`` steps
        (-1: no limit); the episode then ends as in every loop (``end_episode``)."""
        policy, space = self.policy, self.policy.observation_space
        box = isinstance(space, gym.spaces.Box)
        # CRUCIAL: the filter does not change during the episode (update=False below), so
        # its normalisation is computed once, not per step (ES plays millions of steps
        # one row at a time; the per-step std computation cost more than the row).
        normalize = self.filter.frozen()
        raw, info = self.call_env(self.env, "reset", seed=seed, sub_env=0)
        self.start_episode(0, self.new_episode_id(), raw, info)
        state = [np.asarray(s)[None] for s in policy.get_initial_state()]
        # the fast path of feed-forward policies that have one (``FrozenActor``: ES's):
        # one row to its env action, as ``act`` gives it, without act's generic layers
        # (it holds the weights of now: they do not change during the episode)
        actor = policy.frozen_actor(explore) if self._has_frozen_actor and not state else None
        total, length, rows = 0.0, 0, []
        while True:
            if info.get(LIFE_LOSS):  # the game goes on: play it to its end
                raw, info = self.call_env(self.env, "reset", sub_env=0)
                state = [np.asarray(s)[None] for s in policy.get_initial_state()]
            # one Box observation: a batch axis without np.stack's copy (the float32
            # conversion of the preprocessor copies; a kept row is copied if it did not)
            batched = np.asarray(raw)[None] if box else batch_obs(space, [raw])
            flat = self.preprocessor.transform(batched)
            if record_observations:
                rows.append(flat.copy() if np.may_share_memory(flat, raw) else flat)
            # CRUCIAL: update=False: normalise with the current statistics, unchanged by
            # this episode (the caller records its observations, or not).
            obs = normalize(flat)
            if actor is not None:
                action = actor(obs)
            else:
                step = act(policy, obs, policy.action_space, state, explore)
                action, state = step.env_actions[0], step.state_out
            raw, reward, terminated, truncated, info = self.call_env(
                self.env, "step", action, sub_env=0
            )
            total += float(reward)
            length += 1
            if self.step_hook:
                self.step_episode(0, float(reward), raw, info, action)
            ended = (terminated or truncated) and not (terminated and info.get(LIFE_LOSS))
            if ended or length == max_steps:
                break
        if "episode" in info:  # RecordEpisodeStatistics: the whole game, unclipped
            total, length = float(info["episode"]["r"]), int(info["episode"]["l"])
        record = EpisodeRecord(total, length, 0)
        self.end_episode(record, info, raw)
        return PlayedEpisode(record, np.concatenate(rows) if rows else None, info, bool(ended))

    def close(self) -> None:
        """Close the env."""
        self.env.close()


def check_plays_episodes(env: Any, env_id: str) -> None:
    """EnvKindError (``env`` closed) unless an ``EpisodePlayer`` can play ``env``."""
    kind = env_kind(env)
    if not kind.plays_episodes:
        env.close()
        raise EnvKindError(
            f"playing whole episodes needs an env creator that returns a single "
            f"gymnasium.Env, but env {env_id!r} is a {kind.name}",
            kind,
        )


def make_episode_env(
    creator: EnvCreator,
    env_config: Mapping[str, Any],
    worker_index: int = 0,
    env_id: str = "env",
) -> gym.Env:
    """A new env from ``creator`` (vector index 0) that an ``EpisodePlayer`` plays.

    Raises:
        EnvKindError: the creator returns another kind of env (named in the message).
    """
    env = creator(EnvContext(env_config, worker_index, 0))
    check_plays_episodes(env, env_id)
    return env
