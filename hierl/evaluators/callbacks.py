"""User callbacks: hooks into the rollout loops and the trainer (RLlib's DefaultCallbacks).

Subclass ``EpisodeCallbacks``, override the hooks you need and set the class, or
its name as a ``"module:Class"`` string, as config ``callbacks``:

    class PoleAngle(EpisodeCallbacks):
        def on_episode_end(self, *, episode, env_info, worker_index):
            episode.custom_metrics["pole_angle"] = float(episode.last_observation[2])

    PPOTrainer({"env": "CartPole-v1", "callbacks": "my_package.callbacks:PoleAngle"})

Each PolicyEvaluator makes one instance (so the episode hooks run in the process that
samples, remote evaluators included) and the trainer makes one on the driver for
``EpisodeCallbacks.on_train_result``.  The hooks, and how often each is called:

* ``on_episode_start``: once per episode, after the reset that begins it;
* ``on_episode_step``: once per env step of every sub-env (only classes that override it
  pay for a per-step Python call; the vectorised sampler stays array code otherwise);
* ``on_episode_end``: once per finished episode, before it is recorded in the metrics;
  numbers put in ``episode.custom_metrics`` are reported as
  ``custom_metrics/<name>_mean`` (``_min``, ``_max``) over the iteration's episodes;
* ``on_postprocess_trajectory``: once per trajectory (one agent's steps of one episode in
  one sample), *after* the policy's postprocessing (as in RLlib); may change the batch's
  columns in place or add columns (then to every trajectory of the sample);
* ``on_sample_end``: once per ``sample()`` of the envs, with the postprocessed batch;
* ``on_train_result``: on the driver, once per ``Trainer.train()``; may add keys to the
  result dict.

An "episode" is a whole game as the metrics report it: an Atari life loss
(``EpisodicLife``) cuts the training trajectory but not the callbacks' episode.  ES
rollouts and ``hierl rollout`` run the three episode hooks; offline input runs none.

A string names the class without storing code: configs and checkpoints keep the string,
and every process that needs the class imports its module (as Ray Tune and RLlib do).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import TYPE_CHECKING, Any

from hierl.config import ConfigError

if TYPE_CHECKING:
    from hierl.policy_graph import PolicyGraph
    from hierl.sample_batch import MultiAgentBatch, SampleBatch


@dataclasses.dataclass(eq=False)
class Episode:
    """The episode a callback is called for, alive from its start to its end.

    ``episode_reward`` and ``episode_length`` are the totals so far in
    ``on_episode_step`` and the reported totals in ``on_episode_end``; ``last_*`` hold
    the env's latest answer as the env gave it (before preprocessing and filtering):
    the first observation and the reset info in ``on_episode_start``, the final ones in
    ``on_episode_end``.
    """

    episode_id: int
    """The id of the episode's (first) trajectory (``eps_id`` in sample batches)."""
    env_index: int
    """Which sub-env (or multi-agent env copy) of the evaluator plays it."""
    episode_reward: float = 0.0
    """Return so far (multi-agent: summed over the agents)."""
    episode_length: int = 0
    """Env steps so far."""
    last_observation: Any = None
    """The latest raw observation (multi-agent: the dict by agent id)."""
    last_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The env's latest info dict of this sub-env."""
    last_action: Any = None
    """The latest action sent to the env (multi-agent: the dict by agent id)."""
    agent_rewards: dict[Any, float] = dataclasses.field(default_factory=dict)
    """Multi-agent: the return so far of each agent id (empty for single-agent envs)."""
    custom_metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    """Numbers to report (``custom_metrics/<name>_mean`` etc.)."""
    user_data: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Anything the callbacks keep between hooks of this episode (never reported)."""


class EpisodeCallbacks:
    """Hooks into sampling and training; subclass it and override the hooks you need.

    Set the subclass, or its ``"module:Class"`` name, as config ``callbacks``; see
    ``hierl.evaluators.callbacks`` for when each hook runs.  Every hook takes keyword
    arguments only and returns None (``on_train_result`` changes ``result`` in place).
    """

    def on_episode_start(self, *, episode: Episode, worker_index: int) -> None:
        """An episode began: ``episode.last_observation`` is its first observation."""

    def on_episode_step(self, *, episode: Episode, worker_index: int) -> None:
        """The episode took one env step (its totals and ``last_*`` are updated)."""

    def on_episode_end(
        self, *, episode: Episode, env_info: dict[str, Any], worker_index: int
    ) -> None:
        """The episode ended; ``env_info`` is the env's info dict of its last step."""

    def on_postprocess_trajectory(
        self,
        *,
        batch: SampleBatch,
        policy_id: str,
        policy: PolicyGraph,
        agent_id: Any,
        other_agent_batches: dict[Any, tuple[str, SampleBatch]] | None,
        worker_index: int,
    ) -> None:
        """One trajectory, after ``policy`` postprocessed it (change ``batch`` in place).

        ``agent_id`` and ``other_agent_batches`` (agent id → ``(policy_id, batch)`` of the
        same episode and sample) are None for single-agent envs.
        """

    def on_sample_end(self, *, batch: SampleBatch | MultiAgentBatch, worker_index: int) -> None:
        """``sample()`` is about to return ``batch`` (postprocessed)."""

    def on_train_result(self, *, trainer: Any, result: dict[str, Any]) -> None:
        """On the driver, after ``trainer.train()`` built ``result`` (add keys to it)."""


def overrides(callbacks: EpisodeCallbacks | None, hook: str) -> bool:
    """Whether ``callbacks`` overrides ``hook`` (loops skip the work for a no-op hook)."""
    if callbacks is None:
        return False
    return getattr(type(callbacks), hook) is not getattr(EpisodeCallbacks, hook)


def resolve_callbacks(value: Any) -> type[EpisodeCallbacks] | None:
    """The ``EpisodeCallbacks`` subclass config ``callbacks`` names.

    ``value`` is None, such a class, or its ``"module:Class"`` name (the module is
    imported; ``Class`` may be a dotted path inside it).

    Raises:
        ConfigError: naming ``value`` and what is valid, when the module cannot be
            imported, has no such attribute, or it is not an EpisodeCallbacks subclass.
    """
    if value is None:
        return None
    valid = (
        "valid: an hierl.evaluators.EpisodeCallbacks subclass or its name as "
        "'module:Class' (e.g. 'my_package.callbacks:MyCallbacks')"
    )
    cls = value
    if isinstance(value, str):
        module_name, sep, attr = value.partition(":")
        if not sep or not module_name or not attr:
            raise ConfigError(
                f"config field 'callbacks' = {value!r} is not 'module:Class'; {valid}"
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ConfigError(
                f"config field 'callbacks' = {value!r}: cannot import module "
                f"'{module_name}' ({e}); {valid}"
            ) from e
        cls = module
        for part in attr.split("."):
            if not hasattr(cls, part):
                public = sorted(n for n in vars(module) if not n.startswith("_"))
                raise ConfigError(
                    f"config field 'callbacks' = {value!r}: module '{module_name}' has no "
                    f"attribute '{attr}' (its names: {', '.join(public) or 'none'}); {valid}"
                )
            cls = getattr(cls, part)
    if not (inspect.isclass(cls) and issubclass(cls, EpisodeCallbacks)):
        what = f"class {cls.__qualname__}" if inspect.isclass(cls) else f"a {type(cls).__name__}"
        raise ConfigError(
            f"config field 'callbacks' = {value!r} is {what}, not an EpisodeCallbacks "
            f"subclass; {valid}"
        )
    return cls


def make_callbacks(value: Any) -> EpisodeCallbacks | None:
    """An instance of the class ``value`` names (see ``resolve_callbacks``), or None."""
    cls = resolve_callbacks(value)
    return None if cls is None else cls()
