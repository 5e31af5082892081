"""Configs shared by several learning tests."""

APEX_CARTPOLE = {
    "env": "CartPole-v1",
    "num_evaluators": 2,
    "num_cpus_per_evaluator": 0.5,
    "num_envs_per_evaluator": 4,
    "rollout_fragment_length": 16,
    "lr": 2e-3,
    "gamma": 0.98,
    "n_step": 1,
    "dueling": False,
    "train_batch_size": 128,
    "target_network_update_freq": 800,
    "sample_timeout_s": 120,
    "optimizer_config": {
        "num_replay_shards": 2,
        "buffer_size": 50_000,
        "learning_starts": 1000,
        "replay_ratio": 16.0,
        "replay_requests_in_flight_per_shard": 16,
        "min_step_time_s": 0.5,
    },
}
"""Ape-X DQN on CartPole-v1 with 2 evaluators and 2 replay shards: the paper's epsilon
ladder (0.4 and 0.4**8); double DQN with 1-step targets, a plain head and gamma 0.98, the
target copied every 800 env steps (~100 updates at 16 rows replayed per env step).
Measured on the loaded 2-core machine: mean return 100 after 8-27 s of training in 6
runs, 150 after 34-50 s."""

IMPALA_CARTPOLE = {
    "env": "CartPole-v1",
    "num_evaluators": 2,
    "num_cpus_per_evaluator": 0.5,
    "lr": 2e-3,
    "vf_loss_coeff": 0.25,
    "sample_timeout_s": 120,
}
"""IMPALA / APPO on CartPole with 2 remote evaluators (5 sub-envs x 50 steps each,
500-row train batches: the algorithms' defaults) and a faster learning rate."""

PPO_CARTPOLE = {
    "env": "CartPole-v1",
    "num_evaluators": 2,
    "num_envs_per_evaluator": 4,
    "num_cpus_per_evaluator": 0.5,
}
"""PPO's defaults on CartPole-v1 with 2 remote evaluators of 4 sub-envs: mean return 450
within 53k-59k env steps over seeds 0-4 (tests/LEARNING.md)."""
