"""An Atari-shaped test env: what ALE offers the DeepMind wrappers, with random frames.

``FakeAtariEnv`` has ALE's surface (``unwrapped.ale`` with ``lives()`` and the screen
getters, ``get_action_meanings()``, ``_frameskip``), 210x160 RGB uint8 frames of random
pixels and a fixed script: a reward of ``REWARD`` on every ``REWARD_EVERY``-th frame after
the first ``NOOP_MAX`` (the no-ops of a reset, whose rewards no wrapper reports), a life
lost every ``FRAMES_PER_LIFE`` frames, game over when ``LIVES`` are lost.  A whole game
therefore lasts ``GAME_FRAMES`` frames and returns exactly ``GAME_RETURN``, whatever the
agent does and however the wrappers skip or pad frames.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

LIVES = 3
FRAMES_PER_LIFE = 120
REWARD_EVERY = 10
REWARD = 3.0  # outside [-1, 1]: clipped in training batches, not in reported returns
NOOP_MAX = 30  # AtariPreprocessing's no-op reset
GAME_FRAMES = LIVES * FRAMES_PER_LIFE
GAME_RETURN = REWARD * ((GAME_FRAMES - NOOP_MAX) // REWARD_EVERY)
ENV_ID = "hierl_test/FakeAtariNoFrameskip-v4"  # an Atari id: gets the DeepMind pipeline


class _FakeALE:
    def __init__(self, env: FakeAtariEnv):
        self.env = env

    def lives(self) -> int:
        return self.env.lives_left

    def getScreenGrayscale(self, out: np.ndarray) -> None:
        out[...] = self.env.np_random.integers(0, 256, out.shape, dtype=np.uint8)

    def getScreenRGB(self, out: np.ndarray) -> None:
        out[...] = self.env.np_random.integers(0, 256, out.shape, dtype=np.uint8)


class FakeAtariEnv(gym.Env):
    """See the module docstring; ``frameskip`` must be 1 (the wrappers skip frames)."""

    observation_space = gym.spaces.Box(0, 255, (210, 160, 3), np.uint8)
    action_space = gym.spaces.Discrete(6)

    def __init__(self, frameskip: int = 1, **_: Any):
        self._frameskip = frameskip
        self.ale = _FakeALE(self)
        self.frame = 0
        self.lives_left = LIVES

    def get_action_meanings(self) -> list[str]:
        return ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]

    def _screen(self) -> np.ndarray:
        return self.np_random.integers(0, 256, self.observation_space.shape, dtype=np.uint8)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.frame = 0
        self.lives_left = LIVES
        return self._screen(), {"lives": self.lives_left}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        assert self.action_space.contains(int(action))
        self.frame += 1
        reward = REWARD if self.frame % REWARD_EVERY == 0 and self.frame > NOOP_MAX else 0.0
        if self.frame % FRAMES_PER_LIFE == 0:
            self.lives_left -= 1
        return self._screen(), reward, self.lives_left == 0, False, {"lives": self.lives_left}


def register() -> None:
    """Register ``ENV_ID`` (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=FakeAtariEnv)
