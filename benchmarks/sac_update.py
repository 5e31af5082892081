"""One SAC update in hierl against a pure-torch update of the same networks, same run.

The update is everything ``SACPolicy.learn_on_replay_batch`` does to a 256-row replayed
batch (HalfCheetah's shapes: 17-dim observations, 6-dim actions; (256, 256) ReLU actor
and twin critics): the soft TD target from the target critics and a fresh sample of the
policy, both critics' step, the actor's step on the twin minimum, the temperature's step
and the Polyak update of both target critics.  The baseline is that update written
plainly in torch (``torch_update``) on deep copies of the same modules, with
``torch.optim.Adam`` at its defaults and the batch already as tensors; hierl's side
starts from the replayed ``SampleBatch`` of numpy arrays and adds its checks (finite
gradients before each step), its statistics and its TD errors for priorities.
Sampling from the replay buffer is not timed on either side.

The two are timed in alternating rounds (``--rounds`` of ``--updates`` each) in one
process.  The ratio (goal >= 0.9) is the median over rounds of hierl's updates/s over
the baseline's in the round beside it (paired: a load that drifts over the run affects
both sides of a pair alike); the ratio of the two sides' median rounds is reported too.
Written to ``benchmarks/results/sac_update.json`` with the machine's load averages.

Usage::

    .venv/bin/python benchmarks/sac_update.py               # ~1 minute on 2 cores
    .venv/bin/python benchmarks/sac_update.py --quick       # a smoke test
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import statistics
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch.nn import functional as F

from hierl.algorithms.sac import LOG_STD_MAX, LOG_STD_MIN, SACConfig, SACPolicy
from hierl.sample_batch import SampleBatch as SB

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import record

OBS_DIM, ACT_DIM, ROWS = 17, 6, 256
"""HalfCheetah-v5's observation and action sizes; the replayed batch's rows."""


def make_policy(hiddens: tuple[int, ...] = (256, 256), seed: int = 0) -> SACPolicy:
    """A SAC policy with SB3's defaults on HalfCheetah-shaped spaces."""
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
    config = SACConfig.from_dict({"model": {"hiddens": list(hiddens), "activation": "relu"}})
    torch.manual_seed(seed)
    return SACPolicy(obs_space, act_space, config)


def replay_batch(rows: int = ROWS, seed: int = 0) -> SB:
    """A replayed batch as the replay buffer hands it over (numpy columns)."""
    rng = np.random.default_rng(seed)
    return SB(
        {
            SB.OBS: rng.normal(size=(rows, OBS_DIM)).astype(np.float32),
            SB.NEW_OBS: rng.normal(size=(rows, OBS_DIM)).astype(np.float32),
            SB.ACTIONS: rng.uniform(-1, 1, (rows, ACT_DIM)).astype(np.float32),
            SB.REWARDS: rng.normal(size=rows).astype(np.float32),
            SB.TERMINATEDS: rng.random(rows) < 0.01,
            SB.TRUNCATEDS: np.zeros(rows, bool),
        }
    )


class TorchSAC:
    """SAC's update written plainly in torch, on copies of a policy's networks."""

    def __init__(self, policy: SACPolicy, lr: float = 3e-4):
        model = copy.deepcopy(policy.model)
        self.actor, self.log_alpha = model.actor.net, model.log_alpha
        self.q1, self.q2 = model.critic.net, model.critic2.net
        self.q1_target, self.q2_target = model.target_critic.net, model.target_critic2.net
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.q_opt = torch.optim.Adam([*self.q1.parameters(), *self.q2.parameters()], lr=lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=lr)
        self.target_entropy = -float(ACT_DIM)
        self.gamma, self.tau = policy.config.gamma, policy.config.tau

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.actor(obs).chunk(2, dim=-1)
        log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        std = log_std.exp()
        x = mean + std * torch.randn_like(mean)
        log_normal = -0.5 * ((x - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
        log_det = 2.0 * (math.log(2.0) - x - F.softplus(-2.0 * x))
        return torch.tanh(x), (log_normal - log_det).sum(-1)

    def update(self, obs, actions, rewards, terminated, next_obs) -> None:
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_u, next_logp = self.sample(next_obs)
            next_in = torch.cat([next_obs, next_u], -1)
            next_q = torch.min(self.q1_target(next_in), self.q2_target(next_in)).squeeze(-1)
            y = rewards + self.gamma * (1.0 - terminated) * (next_q - alpha * next_logp)
        sa = torch.cat([obs, actions], -1)
        q1, q2 = self.q1(sa).squeeze(-1), self.q2(sa).squeeze(-1)
        q_loss = 0.5 * (((q1 - y) ** 2) + ((q2 - y) ** 2)).mean()
        self.q_opt.zero_grad()
        q_loss.backward()
        self.q_opt.step()
        u, logp = self.sample(obs)
        pi_in = torch.cat([obs, u], -1)
        q_pi = torch.min(self.q1(pi_in), self.q2(pi_in)).squeeze(-1)
        actor_loss = (alpha * logp - q_pi).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()
        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad()
        alpha_loss.backward()
        self.alpha_opt.step()
        with torch.no_grad():
            for online, target in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
                for p, t in zip(online.parameters(), target.parameters(), strict=True):
                    t.lerp_(p, self.tau)


def tensors(batch: SB) -> tuple[torch.Tensor, ...]:
    """The baseline's inputs: the batch's columns as tensors (zero-copy)."""
    return (
        torch.from_numpy(batch[SB.OBS]),
        torch.from_numpy(batch[SB.ACTIONS]),
        torch.from_numpy(batch[SB.REWARDS]),
        torch.from_numpy(batch[SB.TERMINATEDS].astype(np.float32)),
        torch.from_numpy(batch[SB.NEW_OBS]),
    )


def _timed(fn: Any, updates: int) -> float:
    start = time.perf_counter()
    for _ in range(updates):
        fn()
    return updates / (time.perf_counter() - start)


def measure(updates: int, rounds: int, hiddens: tuple[int, ...] = (256, 256)) -> dict[str, Any]:
    """Updates/s of hierl and of the baseline, alternating rounds; medians and ratio."""
    policy = make_policy(hiddens)
    baseline = TorchSAC(policy)
    batch = replay_batch()
    inputs = tensors(batch)

    def hierl_update() -> None:
        policy.learn_on_replay_batch(batch)

    def torch_update() -> None:
        baseline.update(*inputs)

    for fn in (hierl_update, torch_update):  # warm-up: allocator, Adam state
        _timed(fn, max(3, updates // 10))
    hierl_rates, torch_rates = [], []
    for _ in range(rounds):
        hierl_rates.append(_timed(hierl_update, updates))
        torch_rates.append(_timed(torch_update, updates))
    hierl, base = statistics.median(hierl_rates), statistics.median(torch_rates)
    paired = [h / t for h, t in zip(hierl_rates, torch_rates, strict=True)]
    return {
        "hierl_updates_per_s": hierl,
        "torch_updates_per_s": base,
        "ratio": statistics.median(paired),
        "ratio_of_medians": hierl / base,
        "paired_ratios": paired,
        "hierl_rounds": hierl_rates,
        "torch_rounds": torch_rates,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=20, help="updates per timed round")
    parser.add_argument("--rounds", type=int, default=21, help="alternating rounds per side")
    parser.add_argument("--quick", action="store_true", help="10 updates x 2 rounds")
    args = parser.parse_args()
    updates, rounds = (10, 2) if args.quick else (args.updates, args.rounds)
    load_before = os.getloadavg()
    torch.manual_seed(0)
    figures = measure(updates, rounds)
    figures.update(load_before=load_before, load_after=os.getloadavg())
    config = {
        "rows": ROWS,
        "obs_dim": OBS_DIM,
        "act_dim": ACT_DIM,
        "hiddens": [256, 256],
        "updates_per_round": updates,
        "rounds": rounds,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    path = record("sac_update", config, figures)
    print(
        f"SAC update, {ROWS}-row batch, (256, 256) actor and twin critics, obs {OBS_DIM}, "
        f"act {ACT_DIM}, {torch.get_num_threads()} torch threads:\n"
        f"  hierl       {figures['hierl_updates_per_s']:8.1f} updates/s (median of {rounds})\n"
        f"  pure torch  {figures['torch_updates_per_s']:8.1f} updates/s\n"
        f"  ratio       {figures['ratio']:.3f} (median of {rounds} paired rounds; goal >= 0.9)"
        f", ratio of the medians {figures['ratio_of_medians']:.3f}\n"
        f"  load averages before {load_before}, after {figures['load_after']}\n"
        f"  written to {path}"
    )


if __name__ == "__main__":
    main()
