"""A memory task for recurrent-policy tests: repeat a cue seen several steps earlier.

Episode of ``delay + 2`` steps (all observations are 3 floats):

* step 0 shows the cue, a one-hot ``[1, 0, 0]`` or ``[0, 1, 0]`` drawn uniformly;
* steps ``1 .. delay`` are blank ``[0, 0, 0]``;
* step ``delay + 1`` shows the query ``[0, 0, 1]``; the action taken there (``Discrete(2)``)
  earns +1 if it equals the cue, -1 otherwise, and the episode terminates.

Actions before the query earn 0.  The query observation is the same whatever the cue,
so any feed-forward policy answers both cues with the same action distribution and its
expected return is exactly 0; a policy that remembers the cue gets 1.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

CUE_ZERO = np.array([1.0, 0.0, 0.0], dtype=np.float32)
CUE_ONE = np.array([0.0, 1.0, 0.0], dtype=np.float32)
BLANK = np.zeros(3, dtype=np.float32)
QUERY = np.array([0.0, 0.0, 1.0], dtype=np.float32)


class RepeatCueEnv(gym.Env):
    """Show a cue, wait ``delay`` blank steps, then reward repeating the cue (+1 / -1)."""

    def __init__(self, delay: int = 3):
        self.delay = int(delay)
        self.observation_space = spaces.Box(0.0, 1.0, (3,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.cue = 0
        self.t = 0

    def _obs(self) -> np.ndarray:
        if self.t == 0:
            return (CUE_ONE if self.cue else CUE_ZERO).copy()
        if self.t == self.delay + 1:
            return QUERY.copy()
        return BLANK.copy()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.cue = int(self.np_random.integers(2))
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.t == self.delay + 1:
            reward = 1.0 if int(action) == self.cue else -1.0
            return BLANK.copy(), reward, True, False, {"cue": self.cue}
        self.t += 1
        return self._obs(), 0.0, False, False, {}


def make_repeat_cue(env_config: Any) -> RepeatCueEnv:
    """Env creator for trainers: ``env_config`` may set ``delay``."""
    return RepeatCueEnv(delay=dict(env_config).get("delay", 3))
