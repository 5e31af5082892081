"""PolicyEvaluator: envs + policy graph(s) + the rollout loop, in-process or as a Ray actor.

RLlib (ICML 2018) §3.2: "a policy evaluator wraps a policy graph and an environment to
add sample() ... and the methods needed by policy optimizers".  The same class is the
driver's *local evaluator* (worker_index 0; its envs are only created if it samples) and
each remote replica (``PolicyEvaluator.as_remote(num_cpus=...).remote(spec, worker_index=i)``),
built from an ``EvaluatorSpec``.
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from hierl.config import ConfigError
from hierl.evaluators import env_state
from hierl.evaluators.callbacks import make_callbacks
from hierl.evaluators.env import EnvContext, resolve_env_creator
from hierl.evaluators.env_kinds import EnvKind, env_kind
from hierl.evaluators.filters import make_filter
from hierl.evaluators.offline.writer import OutputWriter
from hierl.evaluators.policy_map import build_policy_map
from hierl.evaluators.rollout_core import (
    EpisodePlayer,
    EpisodeRecord,
    FragmentSampler,
    RolloutSettings,
    batch_obs,
    make_episode_env,
)
from hierl.evaluators.sample_queue import SampleQueue
from hierl.evaluators.spec import EvaluatorSpec
from hierl.models.preprocessors import ImagePreprocessor, get_preprocessor, to_env_action
from hierl.policy_graph import GlobalVars, LearnerStats, PolicyGraph, Weights
from hierl.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch
from hierl.utils import round_seed, seed_everything

T = TypeVar("T")


def locked(method: Callable[..., T]) -> Callable[..., T]:
    """Run ``method`` holding the evaluator's lock (the background sampler shares it)."""

    @functools.wraps(method)
    def wrapper(self: PolicyEvaluator, *args: Any, **kwargs: Any) -> T:
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


class PolicyEvaluator:
    """Samples experience with a policy graph and serves the optimizers' requests.

    Args:
        spec: what to build (env, policy class and config, sampling settings); see
            ``EvaluatorSpec``.
        worker_index: 0 for the driver's local evaluator, 1..N for remote replicas (this
            evaluator's seed is ``spec.seed + 10_000 * worker_index``).
        num_threads: torch intra-op threads for this process (remote evaluators: 1).

    With a MultiAgentEnv, ``sample()`` returns a MultiAgentBatch (one SampleBatch per
    policy, ``count`` = environment steps) and ``get_metrics()`` MultiAgentEpisodeRecords.
    ``policy_map`` is built by ``hierl.evaluators.policy_map.build_policy_map``.
    """

    def __init__(
        self, spec: EvaluatorSpec, *, worker_index: int = 0, num_threads: int | None = None
    ):
        if not isinstance(spec, EvaluatorSpec):
            raise TypeError(
                f"PolicyEvaluator takes an EvaluatorSpec (hierl.evaluators.EvaluatorSpec), "
                f"got {type(spec).__name__}"
            )
        if num_threads:
            import torch

            torch.set_num_threads(num_threads)
        self.spec = spec
        self.worker_index = worker_index
        self.env_name = spec.env_name
        self.env_creator = resolve_env_creator(spec.env, spec.sampling.preprocessor_pref)
        self.env_config = dict(spec.env_config or {})
        self.num_envs = spec.sampling.num_envs_per_evaluator
        self.rollout_fragment_length = spec.sampling.rollout_fragment_length
        self.callbacks = make_callbacks(spec.sampling.callbacks)
        self.seed = spec.seed_for(worker_index)
        self._reset_seed = self.seed
        """What new envs reset with: ``seed``, or an evaluation round's (``evaluate``)."""
        seed_everything(self.seed)
        probe = self.env_creator(EnvContext(self.env_config, 0, 0))
        try:
            # what the creator returns picks the rollout loop (``sampler``)
            self.env_kind: EnvKind = env_kind(probe)
            self.multi_agent = self.env_kind.multi_agent
            self.policy_map, self.policy_mapping_fn = build_policy_map(
                probe,
                spec.policy_class,
                spec.policy_config,
                spec.policies,
                spec.sampling.policy_mapping_fn,
                self.env_name,
            )
        finally:
            probe.close()
        self.preprocessors = {
            pid: get_preprocessor(p.observation_space) for pid, p in self.policy_map.items()
        }
        self.preprocessor = next(iter(self.preprocessors.values()))
        obs_filter = spec.sampling.observation_filter
        for pid, prep in self.preprocessors.items():
            if isinstance(prep, ImagePreprocessor) and obs_filter != "NoFilter":
                raise ConfigError(
                    f"observation_filter '{obs_filter}' does not apply to the "
                    f"image observations {prep.space} of policy '{pid}' (they stay uint8 "
                    "and the CNN scales them by 1/255); use observation_filter 'NoFilter'"
                )
        self.filters = {
            pid: make_filter(obs_filter, prep.shape) for pid, prep in self.preprocessors.items()
        }
        to_train = spec.sampling.policies_to_train
        unknown = sorted(set(to_train or ()) - set(self.policy_map))
        if unknown:
            raise ConfigError(
                f"policies_to_train names unknown policies {unknown}; valid policy ids: "
                f"{sorted(self.policy_map)}"
            )
        self.policies_to_train = list(to_train) if to_train is not None else list(self.policy_map)
        self._sampler: FragmentSampler | None = None
        self._episodes: list[EpisodeRecord] = []
        self._lock = threading.RLock()
        self.sample_async = spec.sampling.sample_async
        self._queue: SampleQueue | None = None
        self.writer: OutputWriter | None = None
        if spec.output is not None:
            self.writer = OutputWriter(
                spec.output.path,
                {pid: (p.observation_space, p.action_space) for pid, p in self.policy_map.items()},
                worker_index=worker_index,
                max_file_size=spec.output.max_file_size,
                compression=spec.output.compression,
            )

    # -- construction ------------------------------------------------------------------
    @classmethod
    def as_remote(cls, num_cpus: float = 1, num_gpus: float = 0, **options: Any) -> Any:
        """The Ray actor class for this evaluator, with the given resources."""
        import ray

        return ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, **options)(cls)

    @property
    def policy(self) -> PolicyGraph:
        """The (single-agent) default policy."""
        try:
            return self.policy_map[DEFAULT_POLICY_ID]
        except KeyError:
            raise ValueError(
                f"this evaluator has no '{DEFAULT_POLICY_ID}' but policies "
                f"{sorted(self.policy_map)}: use policy_map[policy_id]"
            ) from None

    @property
    def sampler(self) -> FragmentSampler:
        """The rollout loop for this env's kind (``env_kind``); its envs are created on
        first use."""
        if self._sampler is None:
            self._sampler = self.env_kind.sampler_class.from_evaluator(self)
            if self.writer is not None and not self.spec.output.postprocessed:
                self._sampler.raw_batches = []
        return self._sampler

    def sampler_settings(self) -> RolloutSettings:
        """The settings every rollout loop takes (``FragmentSampler.from_evaluator``)."""
        return RolloutSettings(
            rollout_fragment_length=self.rollout_fragment_length,
            batch_mode=self.spec.sampling.batch_mode,
            clip_rewards=self.spec.sampling.clip_rewards,
            explore=self.spec.explore,
            seed=self._reset_seed,
            worker_index=self.worker_index,
            env_id=self.env_name,
            callbacks=self.callbacks,
        )

    def episode_player(
        self,
        env: Any = None,
        *,
        policy_id: str = DEFAULT_POLICY_ID,
        run_callbacks: bool = True,
    ) -> EpisodePlayer:
        """An ``EpisodePlayer`` of policy ``policy_id``
        (with its preprocessor and observation filter) on ``env``, a single
        ``gymnasium.Env`` (None: a new one from this evaluator's env creator), that runs
        this evaluator's callbacks' episode hooks unless ``run_callbacks`` is False.

        Raises:
            EnvKindError: the env is not a single ``gymnasium.Env``.
        """
        if env is None:
            env = make_episode_env(
                self.env_creator, self.env_config, self.worker_index, self.env_name
            )
        return EpisodePlayer(
            env,
            self._policy(policy_id),
            self.preprocessors[policy_id],
            self.filters[policy_id],
            env_id=self.env_name,
            worker_index=self.worker_index,
            callbacks=self.callbacks if run_callbacks else None,
        )

    # -- sampling ----------------------------------------------------------------------
    def sample(self) -> SampleBatch | MultiAgentBatch:
        """Collect one postprocessed batch of experience (from the queue if async)."""
        if not self.sample_async:
            return self._sample_sent()
        if self._queue is None:
            self._queue = SampleQueue(self._sample_sent, self._lock, self.spec.max_queued_samples)
        return self._queue.get()

    def _sample_sent(self) -> SampleBatch | MultiAgentBatch:
        """The next batch as ``sample()`` sends it: observations compressed if
        ``compress_observations`` (the one place, whatever the input)."""
        batch = self._sample_now()
        if self.spec.sampling.compress_observations:
            batch.compress(bulk=True)
        return batch

    def _sample_now(self) -> SampleBatch | MultiAgentBatch:
        """The next batch from this evaluator's input (subclasses: logged data, clients)."""
        return self.sample_env()

    def sample_env(self) -> SampleBatch | MultiAgentBatch:
        """One batch from the envs (written to ``output`` if set), whatever the input."""
        batch = self.sampler.sample()
        self._episodes.extend(self.sampler.pop_episodes())
        if self.writer is not None:
            self._record(batch)
        return batch

    def _record(self, batch: SampleBatch | MultiAgentBatch) -> None:
        """Write the batch just sampled (or its rows before postprocessing)."""
        raw = self.sampler.raw_batches
        if raw is None:
            self.writer.write(batch)
            return
        for pid, rows in raw:
            self.writer.write_policy_batch(pid, rows, subdir=self.multi_agent)
        raw.clear()

    @locked
    def compute_single_action(
        self, obs: Any, explore: bool = False, policy_id: str = DEFAULT_POLICY_ID
    ) -> Any:
        """A feed-forward policy's action for one raw env observation, in the env's format.

        Recurrent policies carry state from step to step: use
        ``compute_single_action_and_state``.
        """
        if self._policy(policy_id).get_initial_state():
            raise ValueError(
                f"policy {policy_id!r} is recurrent: use compute_single_action_and_state(obs, "
                "state) and pass each returned state to the next call"
            )
        return self.compute_single_action_and_state(obs, None, explore, policy_id)[0]

    @locked
    def compute_single_action_and_state(
        self,
        obs: Any,
        state: list[np.ndarray] | None = None,
        explore: bool = False,
        policy_id: str = DEFAULT_POLICY_ID,
    ) -> tuple[Any, list[np.ndarray]]:
        """``(action, state_out)`` for one raw observation; ``state`` None = the policy's
        initial state (an episode's first step).  Feed-forward policies return ``[]``."""
        policy = self._policy(policy_id)
        flat = self.preprocessors[policy_id].transform(batch_obs(policy.observation_space, [obs]))
        flat = self.filters[policy_id](flat, update=False)
        state = policy.get_initial_state() if state is None else state
        action, state_out, _ = policy.compute_single_action(flat[0], state, explore=explore)
        return to_env_action(policy.action_space, np.asarray(action)[None])[0], state_out

    def _policy(self, policy_id: str) -> PolicyGraph:
        if policy_id not in self.policy_map:
            raise ValueError(f"unknown policy id {policy_id!r}; valid: {sorted(self.policy_map)}")
        return self.policy_map[policy_id]

    @locked
    def evaluate(
        self,
        num_episodes: int,
        weights: Mapping[str, Weights] | None = None,
        filters: Mapping[str, dict[str, Any]] | None = None,
        seed_round: int = 0,
    ) -> list[EpisodeRecord]:
        """Play ``num_episodes`` whole episodes from fresh resets (with ``weights`` and the
        filter ``filters`` when given) and return their records.

        The envs are made anew, so no episode started under older weights; sub-env ``i``
        of ``n`` plays ``(num_episodes + i) // n`` episodes and its later ones are not
        counted (so short episodes are not over-represented, as in SB3's
        ``evaluate_policy``).  Actions are greedy when the spec's ``explore`` is False.
        The new envs reset with ``round_seed(seed, seed_round)``: the same round plays
        the same start states, another round others.
        """
        if weights is not None:
            self.set_weights(weights)
        if filters is not None:
            self.sync_filters(filters)
        self.reset_sampler()
        self._reset_seed = round_seed(self.seed, seed_round)
        try:
            sampler = self.sampler
        finally:
            self._reset_seed = self.seed
        n = sampler.num_envs
        quota = {i: (num_episodes + i) // n for i in range(n)}
        out: list[EpisodeRecord] = []
        while len(out) < num_episodes:
            sampler.sample()
            for record in sampler.pop_episodes():
                if quota.get(record.env_index, 0) > 0:
                    quota[record.env_index] -= 1
                    out.append(record)
        return out

    @locked
    def reset_sampler(self) -> None:
        """Close the envs: the next sample starts fresh episodes in new ones."""
        if self._sampler is not None:
            self._sampler.close()
        self._sampler = None

    @locked
    def get_metrics(self) -> list[EpisodeRecord]:
        """Episodes finished since the last call."""
        out, self._episodes = self._episodes, []
        return out

    # -- learning ----------------------------------------------------------------------
    @locked
    def learn_on_batch(self, batch: SampleBatch | MultiAgentBatch) -> LearnerStats:
        """One update of the default policy on ``batch`` (a SampleBatch), or of each
        policy in ``policies_to_train`` on its own batch (a MultiAgentBatch); returns the
        learner stats per policy id."""
        if not isinstance(batch, MultiAgentBatch):
            return {DEFAULT_POLICY_ID: self.policy.learn_on_batch(batch)}
        stats: LearnerStats = {}
        for pid in self.policies_to_train:
            b = batch.policy_batches.get(pid)
            if b is not None and b.count:
                stats[pid] = self.policy_map[pid].learn_on_batch(b)
        return stats

    @locked
    def compute_gradients(
        self, batch: SampleBatch, clip: bool = True
    ) -> tuple[list[np.ndarray], dict[str, float]]:
        """Gradients of the default policy's loss on ``batch``."""
        return self.policy.compute_gradients(batch, clip=clip)

    @locked
    def apply_gradients(self, grads: list[np.ndarray], clip: bool = False) -> dict[str, float]:
        """Apply gradients to the default policy."""
        return self.policy.apply_gradients(grads, clip=clip)

    # -- weights, filters, state -------------------------------------------------------
    @locked
    def get_weights(self) -> dict[str, Weights]:
        """Weights of every policy, by policy id."""
        return {pid: p.get_weights() for pid, p in self.policy_map.items()}

    @locked
    def set_weights(
        self, weights: Mapping[str, Weights], global_vars: GlobalVars | None = None
    ) -> None:
        """Load weights by policy id and, if given, update the global counters."""
        for pid, w in weights.items():
            self.policy_map[pid].set_weights(w)
        if global_vars is not None:
            self.set_global_vars(global_vars)

    @locked
    def set_global_vars(self, global_vars: GlobalVars) -> None:
        """Pass global counters (``timestep``...) to every policy."""
        for p in self.policy_map.values():
            p.on_global_var_update(global_vars)

    @locked
    def foreach_policy(self, fn: Callable[[PolicyGraph, str], T]) -> list[T]:
        """Call ``fn(policy, policy_id)`` for every policy (utility methods by name)."""
        return [fn(p, pid) for pid, p in self.policy_map.items()]

    def apply(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call ``fn(self, *args, **kwargs)`` (inside the actor for a remote evaluator).

        Optimizers use it to run their evaluator-side steps without this class knowing
        them (e.g. ``sample → gradients → allreduce`` for ``allreduce``).  ``fn`` runs
        without the evaluator's lock: call the evaluator's own (locked) methods in it.
        """
        return fn(self, *args, **kwargs)

    @locked
    def get_filters(self, flush_after: bool = True) -> dict[str, dict[str, Any]]:
        """Each filter's statistics gathered since the last flush."""
        return {
            pid: (f.flush_buffer() if flush_after else f.get_state())
            for pid, f in self.filters.items()
        }

    @locked
    def sync_filters(self, states: Mapping[str, dict[str, Any]]) -> None:
        """Replace each filter's total statistics (its unsynced buffer is kept)."""
        for pid, state in states.items():
            self.filters[pid].set_state(state)

    @locked
    def save(self) -> dict[str, Any]:
        """State of policies, filters and the rollout loop (arrays + JSON scalars).

        ``sampler`` is the single-agent rollout position (current observations, episode
        accumulators, the envs' snapshot; see ``hierl.evaluators.env_state``), saved only
        once this evaluator has sampled; ``{"exact": False, ...}`` if its envs cannot be
        snapshotted.  Multi-agent samplers and async (background) sampling are not saved.
        """
        out: dict[str, Any] = {
            "policies": {pid: p.get_state() for pid, p in self.policy_map.items()},
            "filters": {pid: f.get_checkpoint_state() for pid, f in self.filters.items()},
        }
        if self._sampler is not None and self._sampler.resumable and not self.sample_async:
            out["sampler"] = env_state.get_sampler_state(self._sampler)
        return out

    @locked
    def restore(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``save``.

        Raises:
            ValueError: the state does not fit this evaluator; the message names the policy
                (and the parameter and both shapes for a model-shape mismatch).
        """
        unknown = sorted(set(state["policies"]) - set(self.policy_map))
        if unknown:
            raise ValueError(
                f"checkpoint has policies {unknown} that this trainer does not; its policies: "
                f"{sorted(self.policy_map)}"
            )
        for pid, s in state["policies"].items():
            try:
                self.policy_map[pid].set_state(s)
            except (ValueError, KeyError, TypeError, RuntimeError) as e:
                raise ValueError(f"policy '{pid}': {e}") from e
        sampler_state = state.get("sampler")
        if sampler_state and sampler_state.get("exact") and self.env_kind.sampler_class.resumable:
            # CRUCIAL: before the filters: building the sampler resets its envs and
            # pushes the reset observations through (and into) the filters.
            env_state.set_sampler_state(self.sampler, sampler_state)
        elif sampler_state:
            warnings.warn(
                f"evaluator {self.worker_index}: the checkpoint has no snapshot of env "
                f"'{self.env_name}' ({sampler_state.get('reason', 'not saved')}); sampling "
                "restarts with fresh episodes, so resuming is not exact",
                stacklevel=2,
            )
        for pid, s in state.get("filters", {}).items():
            if pid in self.filters:
                try:
                    self.filters[pid].set_checkpoint_state(s)
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"observation filter of policy '{pid}': {e}") from e

    def get_host(self) -> str:
        """Hostname and pid of the process this evaluator runs in."""
        return f"{os.uname().nodename}:{os.getpid()}"

    def ping(self) -> int:
        """Health check: returns the worker index."""
        return self.worker_index

    def stop(self) -> None:
        """Stop background sampling, finish the output files and close the envs."""
        if self._queue is not None:
            self._queue.stop()
            self._queue = None
        if self.writer is not None:
            self.writer.close()
        if self._sampler is not None:
            self._sampler.close()
        self._sampler = None
