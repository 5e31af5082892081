"""EvaluatorSpec: everything a PolicyEvaluator is built from, as one typed value.

The trainer builds one spec from its config (``Trainer._make_evaluators``); the
evaluator set builds its local evaluator and every remote replica from it, and a failed
replica is recreated from the same spec:

    spec = EvaluatorSpec.of("CartPole-v1", PGPolicy, config, num_envs_per_evaluator=4, seed=0)
    local = PolicyEvaluator(spec)                              # worker_index 0
    remote = PolicyEvaluator.as_remote(num_cpus=1).remote(spec, worker_index=1)
    evaluators = EvaluatorSet(spec, num_evaluators=2)          # both of the above

What differs between the evaluators of one spec is passed beside it: ``worker_index``
(which also offsets the seed) and ``num_threads``.  A spec is immutable; make variants
with ``dataclasses.replace(spec, ...)``.  The sampling settings are one
``SamplingSettings`` value (``spec.sampling``);
``EvaluatorSpec.of`` takes its fields flat.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hierl.evaluators.env import EnvCreator
from hierl.evaluators.offline.settings import InputSpec, OutputSpec
from hierl.evaluators.policy_map import PolicySpec
from hierl.evaluators.settings import SamplingSettings
from hierl.policy_graph import PolicyGraph

DEFAULT_FRAGMENT_LENGTH = 200
"""Steps per sub-env per ``sample()`` of a spec built with ``EvaluatorSpec.of`` (or no
``sampling``) that names none."""


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
    sampling: SamplingSettings = dataclasses.field(
        default_factory=lambda: SamplingSettings(rollout_fragment_length=DEFAULT_FRAGMENT_LENGTH)
    )
    """How to sample (``SamplingSettings``), resolved:
    ``rollout_fragment_length`` > 0, and ``clip_rewards`` None or 0 for no clipping (the
    trainer has already resolved its Atari default)."""
    explore: bool = True
    """Sample actions (False: act greedily, as evaluation evaluators do)."""
    seed: int | None = None
    """Base seed: evaluator ``i`` uses ``seed + 10_000 * i`` and its sub-env ``j`` that
    plus ``j``."""
    max_queued_samples: int = 1
    """Bound of the queue of ``sampling.sample_async`` (batches sampled ahead)."""
    policies: Mapping[str, PolicySpec] | None = None
    """Multi-agent: policy id → PolicySpec (its ``policy_class`` None means
    ``policy_class``, its ``config`` a dict of overrides of ``policy_config`` or a config
    object; the trainer resolves its config's ``policies`` into these).  Needs an env
    creator that returns a MultiAgentEnv; unset with a MultiAgentEnv means one policy,
    ``DEFAULT_POLICY_ID``, for every agent (``sampling.policy_mapping_fn`` maps agent
    ids to policy ids)."""
    input: InputSpec | None = None
    """Where ``sample()`` reads from (None: the simulator); an input with logged data
    makes each evaluator an ``OfflineEvaluator``."""
    output: OutputSpec | None = None
    """Where every sampled batch is written (None: nowhere)."""

    def __post_init__(self) -> None:
        if self.sampling.rollout_fragment_length < 1:
            raise ValueError(
                "EvaluatorSpec sampling.rollout_fragment_length = "
                f"{self.sampling.rollout_fragment_length} is invalid: must be >= 1 (a "
                "trainer resolves its config's 0 with TrainerConfig.fragment_for)"
            )

    @classmethod
    def of(
        cls,
        env: str | EnvCreator,
        policy_class: type[PolicyGraph],
        policy_config: Any = None,
        **options: Any,
    ) -> EvaluatorSpec:
        """A spec with ``options`` given flat: the spec's own fields (``env_config``,
        ``seed``, ``explore``, ``policies``...) and the SamplingSettings fields
        (``rollout_fragment_length``, default 200 here; ``num_envs_per_evaluator``...)."""
        own = {f.name for f in dataclasses.fields(cls)} - {"sampling"}
        known = own | {f.name for f in dataclasses.fields(SamplingSettings)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"EvaluatorSpec.of: unknown options {unknown}; valid: {sorted(known)}")
        sampling = {k: v for k, v in options.items() if k not in own}
        sampling.setdefault("rollout_fragment_length", DEFAULT_FRAGMENT_LENGTH)
        spec_options = {k: v for k, v in options.items() if k in own}
        return cls(
            env, policy_class, policy_config, sampling=SamplingSettings(**sampling), **spec_options
        )

    def for_acting(self, *, explore: bool, seed: int | None, num_envs: int) -> EvaluatorSpec:
        """The spec of evaluators that only act with given weights (evaluation, a
        multi-agent rollout): ``SamplingSettings.for_acting`` with ``num_envs`` sub-envs,
        playing the env whatever training reads, writing nothing."""
        sampling = dataclasses.replace(self.sampling.for_acting(), num_envs_per_evaluator=num_envs)
        return dataclasses.replace(
            self, sampling=sampling, explore=explore, seed=seed, input=None, output=None
        )

    @property
    def env_name(self) -> str:
        """The env's id, or its creator's name (messages, ``EnvError``)."""
        env = self.env
        return env if isinstance(env, str) else getattr(env, "__name__", "env")

    def seed_for(self, worker_index: int) -> int | None:
        """The base seed of evaluator ``worker_index`` (None: unseeded)."""
        return None if self.seed is None else self.seed + 10_000 * worker_index
