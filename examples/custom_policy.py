"""A new algorithm in ~30 lines: REINFORCE as a TorchPolicyGraph subclass.

``ReinforcePolicy`` (normalised returns-to-go as advantages, no baseline) and
``ReinforceTrainer`` are those of docs/guide/custom-algorithms.md, statement for statement
(tests/test_custom_algorithm.py checks it); the plain ``TrainerConfig`` lets it run under
any strategy chosen by name.

Run: ``python examples/custom_policy.py`` (CartPole-v1, about a minute on 2 cores);
``--stop-iters N`` trains N iterations instead of 40 (``--stop-iters 1``: a quick check).
"""

import argparse

import numpy as np

from hierl import SampleBatch, TorchPolicyGraph, Trainer, TrainerConfig
from hierl.postprocessing import discount_cumsum


class ReinforcePolicy(TorchPolicyGraph):
    def postprocess_trajectory(self, batch, other_agent_batches=None):
        returns = discount_cumsum(batch[SampleBatch.REWARDS], self.config.gamma)
        batch[SampleBatch.ADVANTAGES] = (returns - returns.mean()) / (returns.std() + 1e-8)
        return batch

    def loss(self, batch):
        dist_inputs, _ = self.model(batch[SampleBatch.OBS])
        logp = self.dist_class(dist_inputs).logp(batch[SampleBatch.ACTIONS])
        loss = -(logp * batch[SampleBatch.ADVANTAGES]).mean()
        return loss, {"policy_loss": loss.detach()}


class ReinforceTrainer(Trainer):
    name = "REINFORCE"
    config_class = TrainerConfig
    policy_class = ReinforcePolicy


CONFIG = {
    "env": "CartPole-v1",
    "lr": 0.01,
    "train_batch_size": 1000,
    "num_envs_per_evaluator": 4,
    "batch_mode": "complete_episodes",
}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stop-iters", type=int, default=40, help="training iterations (default: %(default)s)"
    )
    args = parser.parse_args()
    if args.stop_iters < 1:
        parser.error(f"--stop-iters must be at least 1, got {args.stop_iters}")
    with ReinforceTrainer(CONFIG) as trainer:
        for _ in range(args.stop_iters):
            result = trainer.train()
            print(result["training_iteration"], np.round(result["episode_reward_mean"], 1))
