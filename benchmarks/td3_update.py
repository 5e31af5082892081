"""One TD3 update in hierl against a pure-torch update of the same networks, same run.

The update is everything ``DDPGPolicy.learn_on_replay_batch`` does with TD3's settings to
a 256-row replayed batch (HalfCheetah's shapes: 17-dim observations, 6-dim actions;
(256, 256) ReLU actor and twin critics): the TD target from the target actor's smoothed
action (noise 0.2 clipped at 0.5) and the minimum of the twin target critics, both
critics' step and, every second update (``policy_delay``), the actor's step on the first
critic and the Polyak update of the target actor and critics.  The baseline is that update
written plainly in torch (``TorchTD3``) on deep copies of the same modules, with
``torch.optim.Adam`` at its defaults and the batch already as tensors; hierl's side
starts from the replayed ``SampleBatch`` of numpy arrays and adds its checks (finite
gradients before each step), its statistics and its TD errors for priorities.
Sampling from the replay buffer is not timed on either side.

The two are timed in alternating rounds (``--rounds`` of ``--updates`` each, an even
count so both sides make the same actor updates) in one process
(``update_timing.paired_rates``: the goal is a paired ratio >= 0.9).  Written to
``benchmarks/results/td3_update.json`` with the machine's load averages.

Usage::

    .venv/bin/python benchmarks/td3_update.py               # ~1 minute on 2 cores
    .venv/bin/python benchmarks/td3_update.py --quick       # a smoke test
"""

from __future__ import annotations

import copy
import os
import sys
from typing import Any

import torch

from hierl.algorithms.ddpg import DDPGPolicy, TD3Config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from update_timing import halfcheetah_policy, measure_update, run_benchmark


def make_policy(hiddens: tuple[int, ...] = (256, 256), seed: int = 0) -> DDPGPolicy:
    """A TD3 policy with its defaults on HalfCheetah-shaped spaces."""
    return halfcheetah_policy(DDPGPolicy, TD3Config, hiddens, seed)


class TorchTD3:
    """TD3's update written plainly in torch, on copies of a policy's networks."""

    def __init__(self, policy: DDPGPolicy):
        model = copy.deepcopy(policy.model)
        cfg = policy.config
        self.actor, self.actor_target = model.actor.net, model.target_actor.net
        self.q1, self.q2 = model.critic.net, model.critic2.net
        self.q1_target, self.q2_target = model.target_critic.net, model.target_critic2.net
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.q_opt = torch.optim.Adam(
            [*self.q1.parameters(), *self.q2.parameters()], lr=cfg.critic_lr
        )
        self.gamma, self.tau, self.delay = cfg.gamma, cfg.tau, cfg.policy_delay
        self.noise, self.noise_clip = cfg.target_noise, cfg.target_noise_clip
        self.updates = 0

    def update(self, obs, actions, rewards, terminated, next_obs) -> None:
        with torch.no_grad():
            next_u = torch.tanh(self.actor_target(next_obs))
            noise = (torch.randn_like(next_u) * self.noise).clamp(-self.noise_clip, self.noise_clip)
            next_u = (next_u + noise).clamp(-1.0, 1.0)
            next_in = torch.cat([next_obs, next_u], -1)
            next_q = torch.min(self.q1_target(next_in), self.q2_target(next_in)).squeeze(-1)
            y = rewards + self.gamma * (1.0 - terminated) * next_q
        sa = torch.cat([obs, actions], -1)
        q1, q2 = self.q1(sa).squeeze(-1), self.q2(sa).squeeze(-1)
        q_loss = ((q1 - y) ** 2).mean() + ((q2 - y) ** 2).mean()
        self.q_opt.zero_grad()
        q_loss.backward()
        self.q_opt.step()
        self.updates += 1
        if self.updates % self.delay:
            return
        actor_loss = -self.q1(torch.cat([obs, torch.tanh(self.actor(obs))], -1)).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()
        with torch.no_grad():
            for online, target in (
                (self.actor, self.actor_target),
                (self.q1, self.q1_target),
                (self.q2, self.q2_target),
            ):
                for p, t in zip(online.parameters(), target.parameters(), strict=True):
                    t.lerp_(p, self.tau)


def measure(updates: int, rounds: int, hiddens: tuple[int, ...] = (256, 256)) -> dict[str, Any]:
    """Updates/s of hierl and of the baseline, alternating rounds; medians and ratio."""
    if updates % 2:
        raise SystemExit(
            f"--updates {updates}: an even count, so both sides update the actor alike"
        )
    policy = make_policy(hiddens)
    return measure_update(policy, TorchTD3(policy), updates, rounds)


def main() -> None:
    run_benchmark("td3_update", "TD3 update", measure, __doc__)


if __name__ == "__main__":
    main()
