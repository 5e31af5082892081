"""SamplingSettings: how every evaluator of a trainer samples, declared once.

``TrainerConfig`` includes these fields as a base class, so users give them as flat
keys (``{"rollout_fragment_length": 200}``) and ``hierl config ALGO`` lists them with
their docs; the trainer hands them, resolved (``rollout_fragment_length`` > 0,
``clip_rewards`` with its Atari default), to the
``EvaluatorSpec`` every evaluator is built from.
Evaluators that only act (evaluation, a multi-agent rollout) sample with
``SamplingSettings.for_acting``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

from hierl.config import Config
from hierl.evaluators.callbacks import resolve_callbacks


@dataclasses.dataclass
class SamplingSettings(Config):
    """The settings an evaluator samples with (see the module docstring)."""

    num_envs_per_evaluator: int = 1
    """Sub-envs stepped together by each evaluator (one batched forward per step; ignored
    when the env creator returns a VectorEnv)."""
    rollout_fragment_length: int = 0
    """Steps per sub-env per sample() call; 0 = the optimizer's ``train_batch_size``
    split over all envs (for ``replay`` and ``apex`` that is the replayed batch, so
    algorithms built on them set this explicitly: DQN 4, DDPG 1)."""
    sample_async: bool = False
    """Evaluators sample in a background thread, queueing one batch ahead (A3C-style)."""
    batch_mode: Literal["truncate_episodes", "complete_episodes"] = "truncate_episodes"
    """Cut episodes at fragment ends (bootstrapping) or return whole episodes only."""
    observation_filter: Literal["NoFilter", "MeanStdFilter"] = "NoFilter"
    """Observation normalisation, synchronised across evaluators every iteration."""
    preprocessor_pref: Literal["deepmind", "none"] = "deepmind"
    """``deepmind``: Atari ids (``ALE/*``, ``*NoFrameskip-v4``) get the DeepMind
    preprocessing (no-op reset, frame skip 4 with max-pooling, 84x84 grayscale, 4 stacked
    frames, episodic life, reward clipping; ``hierl.evaluators.atari``), as in SB3's
    ``AtariWrapper`` and RLlib; ``none``: the env exactly as ``gymnasium.make`` builds it."""
    clip_rewards: float | None = None
    """Clip rewards to ``[-c, c]`` for learning (reported returns stay unclipped); None:
    1.0 for Atari ids under ``preprocessor_pref="deepmind"``, else no clipping; 0: never."""
    compress_observations: bool = False
    """LZ4-compress observations in sample batches sent from evaluators."""
    callbacks: Any = None
    """An ``hierl.evaluators.EpisodeCallbacks`` subclass, or its name as
    ``"module:Class"`` (what YAML files and checkpoints store): hooks into episodes,
    trajectories, samples and results (``hierl.evaluators.callbacks``), e.g. custom
    metrics reported as ``custom_metrics/<name>_mean``."""
    policy_mapping_fn: Callable[[Any], str] | None = None
    """Multi-agent: ``fn(agent_id) -> policy_id``; may be omitted with one policy."""
    policies_to_train: tuple[str, ...] | None = None
    """Multi-agent: the policy ids to update (None: all); the others act but stay frozen."""

    def __post_init__(self) -> None:
        self.check("num_envs_per_evaluator", self.num_envs_per_evaluator >= 1, "must be >= 1")
        self.check("rollout_fragment_length", self.rollout_fragment_length >= 0, "must be >= 0")
        self.check("clip_rewards", self.clip_rewards is None or self.clip_rewards >= 0, ">= 0")
        resolve_callbacks(self.callbacks)  # a bad name fails here, naming what is valid
        post_init = getattr(super(), "__post_init__", None)
        if post_init is not None:  # the next base of a config that includes these settings
            post_init()

    def sampling_settings(self) -> SamplingSettings:
        """These settings alone (of a config that includes them, e.g. a TrainerConfig)."""
        names = [f.name for f in dataclasses.fields(SamplingSettings)]
        return SamplingSettings(**{name: getattr(self, name) for name in names})

    def for_acting(self) -> SamplingSettings:
        """The settings of evaluators that only act with given weights (evaluation, a
        multi-agent rollout): returns unclipped, fragments cut at their ends, observations
        uncompressed, no background thread; the rest as here."""
        return dataclasses.replace(
            self.sampling_settings(),
            clip_rewards=None,
            batch_mode="truncate_episodes",
            compress_observations=False,
            sample_async=False,
        )
