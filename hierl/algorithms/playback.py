"""Play a trained policy in its env: what ``hierl rollout`` runs.

``rollout`` plays whole episodes from fresh resets with a trainer's policy, greedy
unless told to explore, until ``episodes`` episodes or ``steps`` env steps, whichever
comes first.  A single-agent env is played by the evaluator's
``EpisodePlayer`` (preprocessing, observation filter and
recurrent state exactly as in training), optionally rendered on screen
(``render_mode="human"``) or recorded to mp4 files with Gymnasium's ``RecordVideo``
(``render_mode="rgb_array"``; needs moviepy).  A multi-agent env is played by a fresh
in-process evaluator with the trainer's weights and filters, whole episodes only.

Example:

    trainer = Trainer.from_checkpoint(path, num_evaluators=0)
    for record in rollout(trainer, RolloutOptions(episodes=5, video_dir="videos")):
        print(record.episode_reward)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

from hierl.config import ConfigError
from hierl.evaluators import PolicyEvaluator
from hierl.evaluators.env import resolve_env_creator
from hierl.evaluators.rollout_core import EnvKindError, EpisodeRecord, make_episode_env

RENDER_EXTRA = "pip install 'hierl[render]'"
"""What installs the renderers and the video writer (pygame, moviepy)."""


class RolloutError(ConfigError):
    """A rollout that cannot be played as asked (the message says why and what works)."""


@dataclasses.dataclass(frozen=True)
class RolloutOptions:
    """What ``rollout`` plays."""

    episodes: int | None = 10
    """Stop after this many episodes (None: only ``steps`` limits the rollout)."""
    steps: int | None = None
    """Stop after this many env steps in all; the episode running then is cut short
    (single-agent envs only).  None: no limit."""
    explore: bool = False
    """Sample actions from the policy's distribution (False: greedy actions)."""
    seed: int | None = None
    """The first reset's seed (later episodes continue the env's generator)."""
    render: bool = False
    """Show the env on screen (``render_mode="human"``)."""
    video_dir: str | None = None
    """Record every episode as an mp4 file here (``render_mode="rgb_array"``)."""

    def __post_init__(self) -> None:
        if self.episodes is None and self.steps is None:
            raise RolloutError("a rollout needs a limit: episodes, steps or both")
        for name in ("episodes", "steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise RolloutError(f"rollout {name} = {value} is invalid: must be >= 1")
        if self.render and self.video_dir is not None:
            raise RolloutError("render and video_dir exclude each other: pick one")

    @property
    def render_mode(self) -> str | None:
        """The ``render_mode`` the env is made with (None: no rendering)."""
        if self.render:
            return "human"
        return "rgb_array" if self.video_dir is not None else None


@dataclasses.dataclass(frozen=True)
class PlayedRecord:
    """One episode of a rollout: its record and whether ``steps`` cut it short."""

    record: EpisodeRecord
    cut: bool = False


def rollout(trainer: Any, options: RolloutOptions) -> Iterator[PlayedRecord]:
    """Play ``trainer``'s policy as ``options`` say, yielding each episode as it ends.

    Raises:
        RolloutError: options a multi-agent env cannot take (``steps``, rendering,
            video), an env creator that ignores ``render_mode``, or a missing renderer.
    """
    config = trainer.config
    creator = resolve_env_creator(config.env, getattr(config, "preprocessor_pref", "deepmind"))
    env_config = dict(config.env_config)
    if options.render_mode is not None:
        env_config["render_mode"] = options.render_mode
    name = config.env if isinstance(config.env, str) else getattr(config.env, "__name__", "env")
    try:
        env = make_episode_env(creator, env_config, env_id=name)
    except EnvKindError as e:
        if e.kind is None or not e.kind.multi_agent:
            raise RolloutError(f"rollout cannot play env {name!r}: {e}") from None
        yield from _multi_agent_episodes(trainer, options)
        return
    try:
        env = _with_rendering(env, name, options)
        yield from _single_agent_episodes(trainer, env, options)
    finally:
        env.close()


def _with_rendering(env: Any, name: str, options: RolloutOptions) -> Any:
    """``env``, checked to render as asked, wrapped in ``RecordVideo`` for a video."""
    mode = options.render_mode
    if mode is None:
        return env
    if getattr(env, "render_mode", None) != mode:
        env.close()
        raise RolloutError(
            f"env {name!r} was made with render_mode={mode!r} in its env_config but renders "
            f"as {getattr(env, 'render_mode', None)!r}: its creator must pass render_mode on "
            "to the env (gymnasium ids do)"
        )
    if options.video_dir is None:
        return env
    import gymnasium as gym

    try:
        return gym.wrappers.RecordVideo(
            env,
            options.video_dir,
            episode_trigger=lambda _: True,
            name_prefix="rollout",
            disable_logger=True,
        )
    except gym.error.DependencyNotInstalled as e:
        env.close()
        raise RolloutError(f"recording video needs moviepy: {RENDER_EXTRA} ({e})") from None


def _single_agent_episodes(
    trainer: Any, env: Any, options: RolloutOptions
) -> Iterator[PlayedRecord]:
    if options.seed is not None:
        env.action_space.seed(options.seed)
    # recurrent policies carry their state through each episode
    player = trainer.local_evaluator.episode_player(env)
    steps_left = options.steps if options.steps is not None else math.inf
    episodes_left = options.episodes if options.episodes is not None else math.inf
    first = True
    while episodes_left > 0 and steps_left > 0:
        limit = -1 if steps_left == math.inf else int(steps_left)
        played = player.play(
            seed=options.seed if first else None, explore=options.explore, max_steps=limit
        )
        first = False
        length = played.record.episode_length
        steps_left -= length
        episodes_left -= 1
        yield PlayedRecord(played.record, cut=not played.ended)


def _multi_agent_episodes(trainer: Any, options: RolloutOptions) -> Iterator[PlayedRecord]:
    unsupported = [
        flag
        for flag, given in (
            ("steps", options.steps is not None),
            ("render", options.render),
            ("video_dir", options.video_dir is not None),
        )
        if given
    ]
    if unsupported:
        raise RolloutError(
            f"a multi-agent rollout plays whole episodes without rendering: "
            f"{', '.join(unsupported)} cannot be used with it (episodes, explore and seed can)"
        )
    assert options.episodes is not None  # __post_init__: steps is None here
    source = trainer.local_evaluator
    spec = source.spec.for_acting(explore=options.explore, seed=options.seed, num_envs=1)
    evaluator = PolicyEvaluator(spec)
    try:
        records = evaluator.evaluate(
            options.episodes, source.get_weights(), source.get_filters(flush_after=False)
        )
    finally:
        evaluator.stop()
    for record in records:
        yield PlayedRecord(record)


def log_episodes(trainer: Any, episodes: int) -> Iterator[EpisodeRecord]:
    """Play whole episodes with sampled actions through the trainer's own evaluator, whose
    ``output`` logs each one, until at least ``episodes`` (the other sub-envs of the
    last batch may finish more)."""
    evaluator = trainer.local_evaluator
    evaluator.reset_sampler()  # whole episodes only, not the checkpoint's current ones
    done = 0
    while done < episodes:
        evaluator.sample_env()
        for record in evaluator.get_metrics():
            done += 1
            yield record
