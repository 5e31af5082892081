"""Two policies of different algorithms in one env: a PPO policy and a PG policy.

Two CartPoles are the two agents of one MultiAgentEnv (``make_multi_agent``); each agent
leaves when its pole falls.  Agent 0 is trained by the PPO trainer's own policy, agent 1
by a PG policy (``policy_class="PG"``: PG's policy and config classes) with its own
learning rate.  ``policies_to_train`` could freeze either of them.

Run: ``python examples/multi_agent.py`` (about a minute on 2 cores); ``--stop-iters N``
trains N iterations instead of 25 (``--stop-iters 1``: a quick check).
"""

import argparse

import numpy as np

from hierl import PPOTrainer
from hierl.evaluators import PolicySpec, make_multi_agent

MultiCartPole = make_multi_agent("CartPole-v1")

CONFIG = {
    "env": MultiCartPole,
    "env_config": {"num_agents": 2},
    "policies": {
        "ppo": PolicySpec(),  # None: the trainer's own (PPO) policy and config
        "pg": PolicySpec(policy_class="PG", config={"lr": 0.01}),
    },
    "policy_mapping_fn": lambda agent_id: "ppo" if agent_id == 0 else "pg",
    "num_envs_per_evaluator": 4,
    "train_batch_size": 1000,
    "sgd_minibatch_size": 128,
    "num_sgd_iter": 6,
    "model": {"hiddens": (32, 32)},
}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stop-iters", type=int, default=25, help="training iterations (default: %(default)s)"
    )
    args = parser.parse_args()
    if args.stop_iters < 1:
        parser.error(f"--stop-iters must be at least 1, got {args.stop_iters}")
    with PPOTrainer(CONFIG) as trainer:
        for _ in range(args.stop_iters):
            result = trainer.train()
            print(
                result["training_iteration"],
                result["timesteps_total"],
                "ppo:",
                np.round(result["policy_reward_mean/ppo"], 1),
                "pg:",
                np.round(result["policy_reward_mean/pg"], 1),
            )
