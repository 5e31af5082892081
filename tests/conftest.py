"""Shared fixtures: one Ray instance per test session, tiny fake envs."""

from __future__ import annotations

import os
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

import hierl.evaluators.ray_runtime  # noqa: F401  (Ray's environment, before ray is imported)

# Ray runs its workers at nice 15, below the driver.  On a quiet machine that is what a
# central-control design wants (the driver's optimizer loop first: Ape-X DQN 30.7k vs
# 28.2k env samples/s at nice 0 in `benchmarks/optimizers.py`), but beside other work at
# nice 0 the workers starve: with two busy loops on 2 cores a Tune trial's setup took 46 s
# instead of ~2 s.  The suite must pass on a loaded machine, so its workers share the CPU
# on equal terms with everything else.
os.environ.setdefault("RAY_worker_niceness", "0")

torch.set_num_threads(1)


def free_port() -> int:
    """A localhost TCP port nobody listens on now (tests' servers and clients)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RESULT_KEYS = {
    "episode_reward_mean",
    "episode_reward_min",
    "episode_reward_max",
    "episode_len_mean",
    "episodes_this_iter",
    "timesteps_total",
    "timesteps_this_iter",
    "training_iteration",
    "time_this_iter_s",
    "time_total_s",
    "sample_throughput",
    "sample_time_ms",
    "learn_time_ms",
}
"""Keys every ``Trainer.train()`` result carries."""


@pytest.fixture(scope="session")
def ray_session():
    """Start Ray once for the whole session (≈4 s) and shut it down at the end."""
    import ray
    from ray import cloudpickle

    # Test modules are not importable in Ray workers: ship their classes by value.
    here = os.path.dirname(os.path.abspath(__file__))
    for module in list(sys.modules.values()):
        if os.path.dirname(os.path.abspath(getattr(module, "__file__", None) or "/")) == here:
            cloudpickle.register_pickle_by_value(module)
    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=200 * 1024 * 1024,
            logging_level="ERROR",
            log_to_driver=False,
        )
    yield ray
    ray.shutdown()


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


@pytest.fixture
def counting_env():
    """The CountingEnv class (pass as ``env`` with an env_config)."""
    return CountingEnv
