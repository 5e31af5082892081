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
process (``update_timing.paired_rates``: the goal is a paired ratio >= 0.9).
Written to ``benchmarks/results/sac_update.json`` with the machine's load averages.

Usage::

    .venv/bin/python benchmarks/sac_update.py               # ~1 minute on 2 cores
    .venv/bin/python benchmarks/sac_update.py --quick       # a smoke test
"""

from __future__ import annotations

import copy
import math
import os
import sys
from typing import Any

import torch
from torch.nn import functional as F

from hierl.algorithms.sac import LOG_STD_MAX, LOG_STD_MIN, SACConfig, SACPolicy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from update_timing import ACT_DIM, halfcheetah_policy, measure_update, run_benchmark


def make_policy(hiddens: tuple[int, ...] = (256, 256), seed: int = 0) -> SACPolicy:
    """A SAC policy with SB3's defaults on HalfCheetah-shaped spaces."""
    return halfcheetah_policy(SACPolicy, SACConfig, hiddens, seed)


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


def measure(updates: int, rounds: int, hiddens: tuple[int, ...] = (256, 256)) -> dict[str, Any]:
    """Updates/s of hierl and of the baseline, alternating rounds; medians and ratio."""
    policy = make_policy(hiddens)
    return measure_update(policy, TorchSAC(policy), updates, rounds)


def main() -> None:
    run_benchmark("sac_update", "SAC update", measure, __doc__)


if __name__ == "__main__":
    main()
