"""A PolicyGraph written without torch, under every optimizer name.

The policy below is plain numpy: a linear Q-function regressed on the rewards of a
contextual bandit (squared error, so its gradients are right on- and off-policy),
acting by a softmax over Q.  It implements the gradient half of the contract
(``compute_gradients`` / ``apply_gradients`` / ``gradient_names``) but is not a
``TorchPolicyGraph`` and has no flat weights, so each optimizer either learns the
bandit within a small budget or refuses it when the trainer is built, naming what is
missing.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from hierl.algorithms.trainer import Trainer, TrainerConfig
from hierl.config import ConfigError
from hierl.optimizers import get_optimizer_class, optimizer_names
from hierl.policy_graph import PolicyGraph
from hierl.sample_batch import SampleBatch
from tests.support.learning_runs import SEED, train_until

NUM_CONTEXTS = 3
"""Contexts (= actions) of the bandit; a random policy earns 1 / NUM_CONTEXTS."""


class ContextBandit(gym.Env):
    """One-step episodes: observe a one-hot context, reward 1 for the matching action."""

    def __init__(self, config=None):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (NUM_CONTEXTS,), np.float32)
        self.action_space = gym.spaces.Discrete(NUM_CONTEXTS)
        self.context = 0

    def _obs(self) -> np.ndarray:
        return np.eye(NUM_CONTEXTS, dtype=np.float32)[self.context]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.context = int(self.np_random.integers(NUM_CONTEXTS))
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self.context)
        return self._obs(), reward, True, False, {}


class NumpyQPolicy(PolicyGraph):
    """Linear Q-values ``obs @ w + b``; softmax exploration; plain SGD on squared error."""

    temperature = 0.1

    def __init__(self, observation_space, action_space, config):
        super().__init__(observation_space, action_space, config)
        self.w = np.zeros((observation_space.shape[0], action_space.n), np.float32)
        self.b = np.zeros(action_space.n, np.float32)
        self.rng = np.random.default_rng(config.seed)

    def _q(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs, np.float32) @ self.w + self.b

    def compute_actions(self, obs_batch, state_batches=None, explore=True):
        q = self._q(obs_batch)
        if not explore:
            return q.argmax(axis=1), [], {}
        z = np.exp((q - q.max(axis=1, keepdims=True)) / self.temperature)
        p = z / z.sum(axis=1, keepdims=True)
        actions = np.array([self.rng.choice(len(row), p=row) for row in p], np.int64)
        return actions, [], {}

    def gradient_names(self):
        return ["w", "b"]

    def compute_gradients(self, batch, clip=True):
        obs = np.asarray(batch[SampleBatch.OBS], np.float32)
        actions = np.asarray(batch[SampleBatch.ACTIONS], np.int64)
        rows = np.arange(len(actions))
        err = self._q(obs)[rows, actions] - np.asarray(batch[SampleBatch.REWARDS], np.float32)
        d_q = np.zeros((len(actions), self.b.size), np.float32)
        d_q[rows, actions] = err / len(actions)
        grads = [obs.T @ d_q, d_q.sum(axis=0)]
        return grads, {"loss": float(0.5 * np.mean(err**2))}

    def apply_gradients(self, gradients, clip=False):
        self.w -= self.config.lr * gradients[0]
        self.b -= self.config.lr * gradients[1]
        return {}

    def learn_on_batch(self, batch):
        grads, stats = self.compute_gradients(batch)
        self.apply_gradients(grads)
        return stats

    def learning_rate(self, timestep):  # the step size sharded_ps's Adam shards use
        return self.config.lr

    def get_weights(self):
        return {"w": self.w.copy(), "b": self.b.copy()}

    def set_weights(self, weights):
        self.w = np.array(weights["w"], np.float32)
        self.b = np.array(weights["b"], np.float32)


class NumpyQTrainer(Trainer):
    """A custom algorithm: the numpy policy on the plain ``TrainerConfig``, which does not
    narrow ``supported_optimizers``: every registered optimizer that can train the policy
    is accepted by name, with no extra declaration."""

    name = "NUMPY_Q"
    config_class = TrainerConfig
    policy_class = NumpyQPolicy


BASE = {
    "env": ContextBandit,
    "lr": 0.5,
    "train_batch_size": 64,
    "timesteps_per_iteration": 64,
    "rollout_fragment_length": 16,
    "num_envs_per_evaluator": 4,
    "metrics_smoothing_episodes": 64,
    "seed": SEED,
}
OVERRIDES = {
    "sharded_ps": {"lr": 0.05},  # the shards run Adam: steps of ~lr each
    "replay": {"optimizer_config": {"learning_starts": 64, "prioritized_replay": False}},
    # apex learns in a thread only while step() runs: a single round (min_step_time_s 0)
    # can end before the thread is scheduled at all, and then nothing is learnt
    "apex": {"optimizer_config": {"learning_starts": 64, "min_step_time_s": 0.05}},
    "aso": {"optimizer_config": {"min_step_time_s": 0.05}},
    "auto": {"optimizer_config": {"calibration_steps": 1}},
}
"""Per optimizer: settings on top of BASE (learning rates, replay warm-up)."""
REFUSED = {
    "multi_gpu": "TorchPolicyGraph",
    "es": "get_flat_weights",
}
"""Optimizers that cannot train NumpyQPolicy → what their ConfigError names as missing."""


def test_the_parametrization_covers_the_known_optimizers():
    known = {"local", "multi_gpu", "allreduce", "async", "sharded_ps", "replay", "apex", "aso"}
    assert known | {"auto", "es"} <= set(NumpyQTrainer.config_class.optimizer_choices())


def _learns(config: dict) -> None:
    """Train until the smoothed return is >= 0.9 (random play: 1/3), within 40 iterations,
    and check the greedy action of every context; ``auto`` must also finish calibrating."""
    optimizer = config["optimizer"]
    with NumpyQTrainer(config) as trainer:
        run = train_until(
            trainer,
            0.9,
            40,
            unit="training_iteration",
            ready=lambda r: optimizer != "auto" or bool(r["auto_chosen"]),
        )
        result = run.result
        greedy = [
            trainer.compute_single_action(np.eye(NUM_CONTEXTS, dtype=np.float32)[c])
            for c in range(NUM_CONTEXTS)
        ]
    assert run.reached, (optimizer, run)
    assert greedy == list(range(NUM_CONTEXTS)), greedy
    if optimizer == "auto":
        assert result["auto_chosen"] not in ("", "multi_gpu")
        assert "TorchPolicyGraph" in result["auto_skipped/multi_gpu"]


@pytest.mark.learning
@pytest.mark.parametrize("optimizer", sorted(optimizer_names()))
def test_numpy_policy_learns_or_is_refused_at_construction(optimizer):
    config = {**BASE, **OVERRIDES.get(optimizer, {}), "optimizer": optimizer}
    if optimizer in REFUSED:
        with pytest.raises(ConfigError) as info:
            NumpyQTrainer(config)
        message = str(info.value)
        assert f"'{optimizer}'" in message and "NumpyQPolicy" in message
        assert REFUSED[optimizer] in message
        reason = get_optimizer_class(optimizer).missing_policy_capability(NumpyQPolicy)
        assert reason and REFUSED[optimizer] in reason
        return
    assert get_optimizer_class(optimizer).missing_policy_capability(NumpyQPolicy) is None
    _learns(config)


@pytest.mark.ray
@pytest.mark.learning
@pytest.mark.parametrize("optimizer", ["allreduce", "async", "sharded_ps", "auto"])
def test_numpy_gradients_cross_processes(ray_session, optimizer):
    # numpy gradients and weights through the collective, the task pool, the shards
    config = {**BASE, **OVERRIDES.get(optimizer, {}), "optimizer": optimizer}
    _learns({**config, "num_evaluators": 2, "num_cpus_per_evaluator": 0.25})
