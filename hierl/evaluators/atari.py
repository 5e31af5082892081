"""Atari: the DeepMind preprocessing that ``ALE/*`` and ``*NoFrameskip-v4`` ids get by default.

The pipeline is the one users know from Stable-Baselines3's ``AtariWrapper`` and RLlib's
Atari defaults (Mnih et al. 2015; Machado et al. 2018 for the v5 ids' sticky actions):

    gymnasium.make(id, frameskip=1)          # ALE/*-v5 keep their sticky actions (0.25)
    AtariPreprocessing                       # up to 30 no-ops on reset, frame skip 4 with
                                             # max-pooling of the last two frames, 84x84 gray
    RecordEpisodeStatistics                  # full-game, unclipped return and length
    EpisodicLife                             # a lost life ends the *training* episode
    FireReset                                # press FIRE after a reset (games that need it)
    frame_stack(4)                           # uint8 observations of shape (4, 84, 84)

Rewards are clipped to ``[-1, 1]`` in the training batch (``clip_rewards`` None means 1.0
for these ids), never in the env: the samplers report the full-game, unclipped returns
that ``RecordEpisodeStatistics`` records below ``EpisodicLife`` (see
``hierl.evaluators.rollout_core.game_results``).  ``preprocessor_pref="none"`` turns the
whole pipeline off: the env is then exactly what ``gymnasium.make`` builds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import FrameStackObservation, RecordEpisodeStatistics

from hierl.config import ConfigError

PREPROCESSOR_PREFS = ("deepmind", "none")
"""The values of ``preprocessor_pref``: the DeepMind Atari pipeline, or the raw env."""
FRAME_STACK = 4
"""Frames stacked into one observation."""
SCREEN_SIZE = 84
"""Height and width of the grayscale frames."""
ATARI_EXTRA = "pip install 'hierl[atari]'"
"""How to install what Atari ids need (ale-py and OpenCV)."""
LIFE_LOSS = "life_loss"
"""Info key set on a step whose ``terminated`` only marks a lost life (the game goes on)."""


def is_atari_id(env_id: Any) -> bool:
    """Whether ``env_id`` names an Atari game: ``ALE/<Game>-v5`` or ``<Game>NoFrameskip-v4``."""
    return isinstance(env_id, str) and (
        env_id.startswith("ALE/") or env_id.endswith("NoFrameskip-v4")
    )


def register_ale() -> None:
    """Register ale-py's envs with Gymnasium; ConfigError naming the extra when missing."""
    try:
        import ale_py
    except ImportError as e:
        raise ConfigError(f"Atari envs need ale-py, which is not installed: {ATARI_EXTRA}") from e
    gym.register_envs(ale_py)


class EpisodicLife(gym.Wrapper):
    """A lost life ends the training episode (``terminated`` with ``info["life_loss"]``);
    the next ``reset`` goes on with the same game by one no-op step, and only a real game
    over resets the emulator (Mnih et al. 2015; SB3's ``EpisodicLifeEnv``)."""

    def __init__(self, env: gym.Env):
        """Wrap an ALE env (``env.unwrapped.ale`` is read for the lives left)."""
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def _lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Step the game; a lost life (with lives left) ends the episode."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = self._lives()
        if 0 < lives < self.lives and not self.game_over:
            terminated = True
            info[LIFE_LOSS] = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """A full reset after a game over; else one no-op step that continues the game."""
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = self._lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Presses FIRE (then action 2) after every reset, for games that wait for it to start
    (Breakout, ...); SB3's ``FireResetEnv``."""

    def __init__(self, env: gym.Env):
        """Wrap an ALE env whose action 1 is FIRE."""
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        if len(meanings) < 3 or meanings[1] != "FIRE":
            raise ValueError(f"FireReset needs FIRE as action 1, got actions {meanings}")

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset, then FIRE and action 2 (resetting again if either ends the game)."""
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


class CheckFrames(gym.ObservationWrapper):
    """Passes frames through unchanged after checking that each has the shape and dtype
    of the env's observation space (a clear error instead of a broadcast error deep
    inside a frame stack)."""

    def observation(self, observation: Any) -> Any:
        """``observation``, if it fits the space; else ValueError naming both."""
        space = self.observation_space
        shape = getattr(observation, "shape", None)
        dtype = getattr(observation, "dtype", type(observation).__name__)
        if shape != space.shape or dtype != space.dtype:
            raise ValueError(
                f"frame stack: a frame of shape {shape} and dtype {dtype} does not match "
                f"the frames' space {space} (expected shape {space.shape}, dtype "
                f"{space.dtype})"
            )
        return observation


def frame_stack(env: gym.Env, stack_size: int = FRAME_STACK) -> gym.Env:
    """Gymnasium's ``FrameStackObservation`` over ``env``'s checked frames: observations
    of shape ``(stack_size, *frame_shape)``, the first frame repeated at a reset."""
    return FrameStackObservation(CheckFrames(env), stack_size)


def wrap_deepmind(env: gym.Env) -> gym.Env:
    """The DeepMind pipeline of the module docstring over an ALE env with ``frameskip=1``."""
    from gymnasium.wrappers import AtariPreprocessing  # imports OpenCV

    env = AtariPreprocessing(
        env,
        noop_max=30,
        frame_skip=4,
        screen_size=SCREEN_SIZE,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,
    )
    env = RecordEpisodeStatistics(env)
    env = EpisodicLife(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    return frame_stack(env)


def make_atari(env_id: str, env_config: Mapping[str, Any]) -> gym.Env:
    """``gymnasium.make(env_id, frameskip=1, **env_config)`` under ``wrap_deepmind``
    (without OpenCV, AtariPreprocessing raises DependencyNotInstalled, which
    ``hierl.evaluators.env.resolve_env_creator`` turns into one error naming the extra)."""
    return wrap_deepmind(gym.make(env_id, **{"frameskip": 1, **dict(env_config)}))


def default_clip_rewards(env: Any, preprocessor_pref: str) -> float | None:
    """The reward clip ``clip_rewards=None`` stands for: 1.0 for Atari ids under the
    DeepMind pipeline, else None (no clipping)."""
    return 1.0 if preprocessor_pref == "deepmind" and is_atari_id(env) else None
