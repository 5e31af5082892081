"""EvaluatorSpec: everything a PolicyEvaluator is built from, as one typed value.

The trainer builds one spec from its config (``Trainer._make_evaluators``); the
evaluator set builds its local evaluator and every remote replica from it, and a failed
replica is recreated from the same spec::

    spec = EvaluatorSpec("CartPole-v1", PGPolicy, config, num_envs=4, seed=0)
    local = PolicyEvaluator(spec)                              # worker_index 0
    remote = PolicyEvaluator.as_remote(num_cpus=1).remote(spec, worker_index=1)
    evaluators = EvaluatorSet(spec, num_evaluators=2)          # both of the above

What differs between the evaluators of one spec is passed beside it: ``worker_index``
(which also offsets the seed) and ``num_threads``.  A spec is immutable; make variants
with ``dataclasses.replace(spec, ...)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from hierl.evaluators.callbacks import EpisodeCallbacks
from hierl.evaluators.env import EnvCreator
from hierl.evaluators.offline.settings import InputSpec, OutputSpec
from hierl.evaluators.policy_map import PolicySpec
from hierl.policy_graph import PolicyGraph


@dataclasses.dataclass(frozen=True)
class EvaluatorSpec:
    """The settings every PolicyEvaluator of a trainer shares (see the module docstring)."""

    env: str | EnvCreator
    """A Gymnasium id, a name given to ``register_env`` or an env creator."""
    policy_class: type[PolicyGraph]
    """The PolicyGraph subclass to build (the default of multi-agent ``policies``)."""
    policy_config: Any = None
    """Passed to the policy graph (the trainer's config object)."""
    _: dataclasses.KW_ONLY
    env_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The user's dict handed to the env creator (inside an ``EnvContext``)."""
    num_envs: int = 1
    """Sub-envs stepped together (ignored when the creator returns a VectorEnv)."""
    rollout_fragment_length: int = 200
    """Steps per sub-env per ``sample()``."""
    batch_mode: str = "truncate_episodes"
    """``truncate_episodes`` or ``complete_episodes``."""
    observation_filter: str = "NoFilter"
    """``NoFilter`` or ``MeanStdFilter``."""
    preprocessor_pref: str = "deepmind"
    """``deepmind``: Atari ids get the DeepMind preprocessing (:mod:`hierl.evaluators.atari`);
    ``none``: every id is exactly what ``gymnasium.make`` builds."""
    clip_rewards: float | None = None
    """Clip rewards to ``[-c, c]`` in the batch (metrics stay unclipped); None or 0: no
    clipping (the trainer has already resolved its Atari default)."""
    explore: bool = True
    """Sample actions (False: act greedily, as evaluation evaluators do)."""
    seed: int | None = None
    """Base seed: evaluator ``i`` uses ``seed + 10_000 * i`` and its sub-env ``j`` that
    plus ``j``."""
    compress_observations: bool = False
    """LZ4-compress OBS/NEW_OBS in returned batches."""
    callbacks: type[EpisodeCallbacks] | str | None = None
    """An EpisodeCallbacks subclass or its ``"module:Class"`` name (imported in each
    evaluator's process), instantiated in each evaluator."""
    sample_async: bool = False
    """Sample in a background thread into a queue of ``max_queued_samples`` batches
    (A3C-style); ``sample()`` then returns the oldest queued batch."""
    max_queued_samples: int = 1
    """Bound of that queue."""
    policies: Mapping[str, PolicySpec] | None = None
    """Multi-agent: policy id → PolicySpec (its ``policy_class`` None means
    ``policy_class``, its ``config`` a dict of overrides of ``policy_config`` or a config
    object).  Needs an env creator that returns a MultiAgentEnv; unset with a
    MultiAgentEnv means one policy, ``DEFAULT_POLICY_ID``, for every agent."""
    policy_mapping_fn: Callable[[Any], str] | None = None
    """Agent id → policy id; may be omitted with a single policy."""
    policies_to_train: list[str] | tuple[str, ...] | None = None
    """The policy ids optimizers update (None: all)."""
    input: InputSpec | None = None
    """Where ``sample()`` reads from (None: the simulator); an input with logged data
    makes each evaluator an :class:`~hierl.evaluators.offline.OfflineEvaluator`."""
    output: OutputSpec | None = None
    """Where every sampled batch is written (None: nowhere)."""

    @property
    def env_name(self) -> str:
        """The env's id, or its creator's name (messages, ``EnvError``)."""
        env = self.env
        return env if isinstance(env, str) else getattr(env, "__name__", "env")

    def seed_for(self, worker_index: int) -> int | None:
        """The base seed of evaluator ``worker_index`` (None: unseeded)."""
        return None if self.seed is None else self.seed + 10_000 * worker_index
