"""CountingEnv: a fixed-length fake env whose observations count the steps."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class CountingEnv(gym.Env):
    """Fixed-length fake env: obs = [t, env_marker], reward 1 per step.

    Ends after ``length`` steps: terminated if ``terminate`` else truncated.  The
    observation's second entry tells envs apart (seed-dependent), so tests can check
    which sub-env a row came from.
    """

    def __init__(self, config=None):
        config = config or {}
        self.length = int(config.get("length", 5))
        self.terminate = bool(config.get("terminate", True))
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.marker = 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.marker = float(self.np_random.integers(0, 1_000_000))
        return np.array([self.t, self.marker], np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        obs = np.array([self.t, self.marker], np.float32)
        return obs, 1.0, done and self.terminate, done and not self.terminate, {}
