"""Fixtures shared by the replay actor-critics' tests (DDPG / TD3 and SAC): the spaces,
a tiny Pendulum config, a batch with a terminated and a truncated row, and float64 numpy
forward passes of the networks to check the torch numerics against."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from hierl.sample_batch import SampleBatch as SB

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
# Asymmetric bounds: scaling must use the centre and the half range, not just max_action.
ACT_SPACE = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
TINY_NET = {"hiddens": [8, 8], "activation": "relu"}
TINY_PENDULUM = {
    "env": "Pendulum-v1",
    "model": TINY_NET,
    "rollout_fragment_length": 10,
    "train_batch_size": 16,
    "replay_ratio": 16.0,
    "buffer_size": 500,
    "learning_starts": 50,
    "random_timesteps": 30,
    "timesteps_per_iteration": 0,  # one optimizer step (10 env steps) per train()
}
APEX_PENDULUM = {
    "env": "Pendulum-v1",
    "model": {"hiddens": [32, 32], "activation": "relu"},
    "num_evaluators": 2,
    "num_cpus_per_evaluator": 0.5,
    "rollout_fragment_length": 20,
    "train_batch_size": 32,
    "replay_ratio": 8.0,
    "buffer_size": 2000,
    "learning_starts": 200,
    "num_replay_shards": 2,
    "max_weight_sync_delay": 100,
    "min_step_time_s": 0.5,
    "sample_timeout_s": 120,
}
"""Ape-X on Pendulum with 2 remote evaluators and 2 replay shards (Ray tests)."""


def make_batch(n: int = 6, seed: int = 0) -> SB:
    """``n`` random rows in the spaces above; row 1 terminated, row 2 truncated."""
    rng = np.random.default_rng(seed)
    terminated = np.zeros(n, bool)
    truncated = np.zeros(n, bool)
    terminated[1] = True  # no bootstrap
    truncated[2] = True  # time limit: bootstraps
    return SB(
        {
            SB.OBS: rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            SB.NEW_OBS: rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            SB.ACTIONS: rng.uniform(ACT_SPACE.low, ACT_SPACE.high, (n, 2)).astype(np.float32),
            SB.REWARDS: rng.normal(size=n).astype(np.float32),
            SB.TERMINATEDS: terminated,
            SB.TRUNCATEDS: truncated,
        }
    )


def np_mlp(weights: dict, prefix: str, x: np.ndarray) -> np.ndarray:
    """The MLP ``prefix.net.net.{i}`` in float64 numpy: relu between layers."""
    keys = [k for k in weights if k.startswith(prefix + ".net.net.") and k.endswith(".weight")]
    layers = sorted(int(k.split(".")[-2]) for k in keys)
    x = x.astype(np.float64)
    for j, i in enumerate(layers):
        x = x @ weights[f"{prefix}.net.net.{i}.weight"].T + weights[f"{prefix}.net.net.{i}.bias"]
        if j < len(layers) - 1:
            x = np.maximum(x, 0.0)
    return x


def np_critic(weights: dict, prefix: str, obs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Q(obs, u) of the critic ``prefix`` (u: normalised actions)."""
    return np_mlp(weights, prefix, np.concatenate([obs, u], axis=1))[:, 0]


def normalise(actions: np.ndarray) -> np.ndarray:
    """Env actions of ACT_SPACE mapped to [-1, 1]."""
    center = (ACT_SPACE.high + ACT_SPACE.low) / 2
    half = (ACT_SPACE.high - ACT_SPACE.low) / 2
    return (actions - center) / half


def perturb_targets(policy: torch.nn.Module) -> None:
    """Make the target networks differ from the online ones (so tests can tell them apart)."""
    with torch.no_grad():
        for _, target in policy.model.online_target_pairs():
            for p in target.parameters():
                p.add_(0.3 * torch.randn_like(p))


def changed(a: dict, b: dict, prefix: str) -> bool:
    """Whether any weight named ``prefix...`` differs between ``a`` and ``b``."""
    return any(not np.array_equal(a[k], b[k]) for k in a if k.startswith(prefix))


def critic_grads_around_the_actor_step(policy, batch: SB) -> tuple[list, list]:
    """One ``learn_on_batch``: the critics' gradients as the critic step applied them,
    and as they are after the whole update (actor step included)."""
    params = [p for critic in policy.model.critics() for p in critic.parameters()]
    applied = []
    step = policy._step

    def recording_step(which, values, batch):
        if which == "critic":
            applied.extend(p.grad.clone() for p in params)
        return step(which, values, batch)

    policy._step = recording_step
    try:
        policy.learn_on_batch(batch)
    finally:
        del policy._step
    return applied, [p.grad for p in params]
