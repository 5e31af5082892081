"""DQN and Ape-X DQN: targets in closed form, dueling heads, exploration, target network,
state, trainers on ``replay`` / ``async`` / ``apex``, and CartPole learning tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from hierl.algorithms.dqn import (
    ApexDQNConfig,
    ApexTrainer,
    DQNConfig,
    DQNPolicy,
    DQNTrainer,
    QNetwork,
)
from hierl.algorithms.registry import get_trainer_class
from hierl.config import ConfigError
from hierl.models import ModelConfig
from hierl.policy_graph import GlobalVars
from hierl.postprocessing import N_STEP_DISCOUNTS
from hierl.sample_batch import SampleBatch as SB
from tests.support.counting_env import CountingEnv
from tests.support.helpers import RESULT_KEYS, train_until_done
from tests.support.learning_runs import SEED, train_until

pytestmark = pytest.mark.timeout(120)

TINY = {"model": {"hiddens": [8], "activation": "relu"}, "lr": 1e-2}


def _policy(seed: int = 0, **changes) -> DQNPolicy:
    torch.manual_seed(seed)  # the initial weights
    env = CountingEnv()
    config = DQNConfig.from_dict({**TINY, **changes})
    return DQNPolicy(env.observation_space, env.action_space, config)


def _perturb(policy: DQNPolicy, seed: int = 1) -> None:
    """Make the online network differ from the target network (as after some learning)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen))


def _q(net, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return net.q_values(torch.as_tensor(obs)).numpy().astype(np.float64)


def _td_batch() -> SB:
    """Three rows: terminated, truncated (1-step), and an n-step row with gamma^3."""
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(3, 2)).astype(np.float32)
    new_obs = rng.normal(size=(3, 2)).astype(np.float32)
    return SB(
        obs=obs,
        new_obs=new_obs,
        actions=np.array([0, 1, 1]),
        rewards=np.array([1.0, -0.5, 2.0], np.float32),
        terminateds=np.array([True, False, False]),
        truncateds=np.array([False, True, False]),
        prio_weights=np.array([1.0, 0.5, 2.0], np.float32),
    )


def _hand_targets(policy: DQNPolicy, batch: SB, discounts: np.ndarray, double: bool):
    q = _q(policy.model, batch[SB.OBS])
    q_next_online = _q(policy.model, batch[SB.NEW_OBS])
    q_next_target = _q(policy.target_model, batch[SB.NEW_OBS])
    expected_q, expected_target = [], []
    for i in range(batch.count):
        a_next = (q_next_online if double else q_next_target)[i].argmax()
        boot = 0.0 if batch[SB.TERMINATEDS][i] else q_next_target[i, a_next]
        expected_q.append(q[i, batch[SB.ACTIONS][i]])
        expected_target.append(batch[SB.REWARDS][i] + discounts[i] * boot)
    return np.array(expected_q), np.array(expected_target)


# -- the TD target in closed form ----------------------------------------------------------
@pytest.mark.parametrize("double_q", [True, False])
def test_td_targets_match_a_hand_computation(double_q):
    g = 0.9
    policy = _policy(gamma=g, double_q=double_q)
    _perturb(policy)
    batch = _td_batch()
    discounts = np.array([g**3, g**2, g**3])
    batch[N_STEP_DISCOUNTS] = discounts.astype(np.float32)
    _, q_taken, target = policy.q_and_targets(policy.to_tensors(batch))
    expected_q, expected_target = _hand_targets(policy, batch, discounts, double_q)
    np.testing.assert_allclose(q_taken.detach().numpy(), expected_q, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(target.numpy(), expected_target, rtol=1e-5, atol=1e-6)
    assert target.numpy()[0] == pytest.approx(1.0)  # terminated: the reward alone
    # without the n-step column every row is a 1-step transition (discount gamma)
    del batch[N_STEP_DISCOUNTS]
    *_, target_1 = policy.q_and_targets(policy.to_tensors(batch))
    _, expected_1 = _hand_targets(policy, batch, np.full(3, g), double_q)
    np.testing.assert_allclose(target_1.numpy(), expected_1, rtol=1e-5, atol=1e-6)


def test_double_q_and_plain_targets_differ_where_the_argmaxes_do():
    plain, double = _policy(double_q=False), _policy(double_q=True)
    _perturb(plain)
    double.set_state(plain.get_state())
    rng = np.random.default_rng(0)
    batch = SB(
        obs=rng.normal(size=(32, 2)).astype(np.float32),
        new_obs=rng.normal(size=(32, 2)).astype(np.float32),
        actions=rng.integers(0, 2, 32),
        rewards=rng.normal(size=32).astype(np.float32),
        terminateds=np.zeros(32, bool),
    )
    q_online = _q(plain.model, batch[SB.NEW_OBS]).argmax(1)
    q_target = _q(plain.target_model, batch[SB.NEW_OBS]).argmax(1)
    assert (q_online != q_target).any()  # the perturbation makes them disagree somewhere
    *_, t_plain = plain.q_and_targets(plain.to_tensors(batch))
    *_, t_double = double.q_and_targets(double.to_tensors(batch))
    differ = ~np.isclose(t_plain.numpy(), t_double.numpy())
    np.testing.assert_array_equal(differ, q_online != q_target)
    assert (t_double.numpy() <= t_plain.numpy() + 1e-6).all()  # max_a Q' is an upper bound


def test_loss_is_weighted_huber_and_learn_returns_td_before_the_update():
    policy = _policy(huber_delta=1.0)
    _perturb(policy)
    batch = _td_batch()
    tensors = policy.to_tensors(batch)
    _, q_taken, target = policy.q_and_targets(tensors)
    per_row = F.huber_loss(q_taken, target, reduction="none").detach().numpy()
    loss, _ = policy.loss(tensors)
    expected_loss = np.mean(batch[SB.PRIO_WEIGHTS] * per_row)
    assert float(loss.detach()) == pytest.approx(float(expected_loss), rel=1e-5)
    expected_td = (q_taken - target).detach().numpy()
    np.testing.assert_allclose(policy.compute_td_errors(batch), np.abs(expected_td), rtol=1e-5)
    before = policy.get_weights()
    result = policy.learn_on_replay_batch(batch)
    np.testing.assert_allclose(result.td_error, expected_td, rtol=1e-5, atol=1e-6)
    assert {"mean_q", "mean_td_error", "total_loss", "grad_gnorm"} <= set(result.stats)
    assert any(not np.array_equal(before[k], v) for k, v in policy.get_weights().items())


def test_cql_adds_alpha_times_logsumexp_minus_the_data_actions_q():
    policy = _policy(cql_alpha=0.5)
    _perturb(policy)
    batch = _td_batch()
    loss, _ = policy.loss(policy.to_tensors(batch))
    q = _q(policy.model, batch[SB.OBS])
    q_taken, target = _hand_targets(policy, batch, np.full(3, policy.config.gamma), True)
    huber = F.huber_loss(torch.tensor(q_taken), torch.tensor(target), reduction="none").numpy()
    conservative = np.log(np.exp(q).sum(axis=1)) - q_taken
    expected = np.mean(batch[SB.PRIO_WEIGHTS] * (huber + 0.5 * conservative))  # all weighted
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    # the term pushes Q of the actions the data did not take down, of those it took up
    policy.learn_on_batch(batch)
    after = _q(policy.model, batch[SB.OBS])
    taken = np.eye(q.shape[1], dtype=bool)[batch[SB.ACTIONS]]
    assert ((after - q)[~taken].mean()) < ((after - q)[taken].mean())


def test_dueling_head_is_value_plus_centred_advantage():
    env = CountingEnv()
    net = QNetwork(env.observation_space, env.action_space, ModelConfig(hiddens=(8,)))
    obs = torch.randn(5, 2)
    with torch.no_grad():
        features = net.torso(obs)
        v, a = net.value_head(features), net.advantage_head(features)
        q = net.q_values(obs)
    np.testing.assert_allclose(q.numpy(), (v + a - a.mean(1, keepdim=True)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(q.mean(1).numpy(), v[:, 0].numpy(), rtol=1e-5, atol=1e-6)
    plain = QNetwork(env.observation_space, env.action_space, ModelConfig(), dueling=False)
    assert plain.value_head is None
    with pytest.raises(ValueError, match="Discrete action space"):
        QNetwork(env.observation_space, env.observation_space, ModelConfig())


# -- exploration, target network, state ----------------------------------------------------
def test_epsilon_schedule_pinning_and_validation():
    policy = _policy(initial_epsilon=1.0, final_epsilon=0.1, epsilon_timesteps=100)
    assert policy.epsilon == 1.0
    policy.on_global_var_update(GlobalVars(timestep=50))
    assert policy.epsilon == pytest.approx(0.55)
    policy.on_global_var_update(GlobalVars(timestep=10_000))
    assert policy.epsilon == pytest.approx(0.1)
    policy.set_exploration_scale(0.3)
    policy.on_global_var_update(GlobalVars(timestep=0))
    assert policy.epsilon == 0.3 and policy.epsilon_pinned
    for bad in (1.5, -0.1):
        with pytest.raises(ValueError, match=f"epsilon must be in \\[0, 1\\], got {bad}"):
            policy.set_exploration_scale(bad)
    assert policy.epsilon == 0.3
    policy.set_exploration_scale(None)  # back to the schedule
    assert not policy.epsilon_pinned and policy.epsilon == 1.0
    assert _policy(epsilon_timesteps=0, final_epsilon=0.05).epsilon == 0.05


def test_epsilon_greedy_actions():
    policy = _policy()
    _perturb(policy)
    obs = np.random.default_rng(0).normal(size=(200, 2)).astype(np.float32)
    greedy = _q(policy.model, obs).argmax(1)
    policy.set_exploration_scale(0.0)
    np.testing.assert_array_equal(policy.compute_actions(obs)[0], greedy)
    policy.set_exploration_scale(1.0)
    np.testing.assert_array_equal(policy.compute_actions(obs, explore=False)[0], greedy)
    random_actions = policy.compute_actions(obs)[0]
    assert 0.3 < np.mean(random_actions != greedy) < 0.7  # uniform over 2 actions


def test_update_target_copies_the_online_weights():
    policy = _policy()
    initial = policy.get_target_weights()
    _perturb(policy)
    online = policy.get_weights()
    assert all(np.array_equal(initial[k], v) for k, v in policy.get_target_weights().items())
    assert any(not np.array_equal(initial[k], v) for k, v in online.items())
    policy.update_target()
    for k, v in policy.get_target_weights().items():
        np.testing.assert_array_equal(v, online[k])
    _perturb(policy, seed=2)  # a copy, not shared storage
    assert any(not np.array_equal(policy.get_weights()[k], v) for k, v in online.items())
    for k, v in policy.get_target_weights().items():
        np.testing.assert_array_equal(v, online[k])


def test_state_round_trip_includes_target_weights_and_epsilon():
    policy = _policy()
    _perturb(policy)
    policy.learn_on_batch(_td_batch())  # optimizer moments
    policy.update_target()
    _perturb(policy, seed=3)  # online != target
    policy.set_exploration_scale(0.25)
    policy.on_global_var_update(GlobalVars(timestep=123))
    state = policy.get_state()
    other = _policy(seed=99)
    other.set_state(state)
    for get in ("get_weights", "get_target_weights"):
        mine, theirs = getattr(policy, get)(), getattr(other, get)()
        assert set(mine) == set(theirs)
        for k, v in mine.items():
            np.testing.assert_array_equal(theirs[k], v)
    assert other.epsilon == 0.25 and other.epsilon_pinned and other.global_timestep == 123
    batch = _td_batch()
    np.testing.assert_allclose(other.compute_td_errors(batch), policy.compute_td_errors(batch))
    policy.learn_on_batch(batch), other.learn_on_batch(batch)  # same moments: same step
    for k, v in policy.get_weights().items():
        np.testing.assert_allclose(other.get_weights()[k], v, rtol=1e-6)


# -- configs -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_step": 0}, "n_step.*must be >= 1"),
        ({"final_epsilon": 1.5}, "final_epsilon.*in \\[0, 1\\]"),
        ({"learning_starts": 0}, "learning_starts.*must be >= 1"),
        ({"target_network_update_freq": 0}, "target_network_update_freq"),
        ({"double_qq": True}, "did you mean 'double_q'"),
    ],
)
def test_bad_dqn_config_is_named(changes, message):
    with pytest.raises(ConfigError, match=message):
        DQNConfig.from_dict(changes)
    with pytest.raises(ConfigError, match=r"num_replay_shards.*must be >= 1"):
        ApexDQNConfig.from_dict({"num_replay_shards": 0})


def test_registry_and_unsupported_optimizers_list_the_valid_ones():
    assert get_trainer_class("DQN") is DQNTrainer and get_trainer_class("APEX") is ApexTrainer
    with pytest.raises(ConfigError, match="not supported by DQNConfig; valid: replay, apex, async"):
        DQNTrainer({"env": "CartPole-v1", "optimizer": "local"})
    # APEX is a preset of DQN: the same optimizers, apex by default
    assert ApexTrainer.config_class.default_optimizer == "apex"
    with pytest.raises(ConfigError, match="not supported by ApexDQNConfig; valid: replay, apex"):
        ApexTrainer({"env": "CartPole-v1", "optimizer": "local"})


# -- the trainer in-process ----------------------------------------------------------------
LOCAL = {
    **TINY,
    "env": "CartPole-v1",
    "timesteps_per_iteration": 64,
    "learning_starts": 32,
    "train_batch_size": 16,
}


def test_trainer_iteration_n_step_batches_and_target_cadence():
    with DQNTrainer({**LOCAL, "target_network_update_freq": 4}) as t:
        batch = t.local_evaluator.sample()
        assert N_STEP_DISCOUNTS in batch and batch.count == 4
        result = t.train()
        policy = t.get_policy()
        # every step samples 4 rows: the target was refreshed after the last one
        assert t.last_target_update == t.optimizer.num_steps_sampled
        for k, v in policy.get_target_weights().items():
            np.testing.assert_array_equal(v, policy.get_weights()[k])
    assert set(result) >= RESULT_KEYS | {"epsilon", "learner/mean_q", "learner/total_loss"}
    assert result["timesteps_this_iter"] == 64 and result["num_updates"] > 0
    assert result["epsilon"] < 1.0
    with DQNTrainer({**LOCAL, "target_network_update_freq": 10**6}) as t:
        initial = t.get_policy().get_target_weights()
        t.train()
        assert t.last_target_update == 0
        for k, v in t.get_policy().get_target_weights().items():
            np.testing.assert_array_equal(v, initial[k])


def test_same_seed_gives_identical_weights():
    weights = []
    for _ in range(2):
        with DQNTrainer({**LOCAL, "target_network_update_freq": 16}) as t:
            t.train(), t.train()
            weights.append(t.get_weights()["default_policy"])
    for k, v in weights[0].items():
        np.testing.assert_array_equal(weights[1][k], v)


def test_checkpoint_restores_target_epsilon_and_cadence(tmp_path):
    config = {**LOCAL, "target_network_update_freq": 40}
    with DQNTrainer(config) as t:
        t.train(), t.train()
        path = t.save(tmp_path / "dqn")
        state = t.get_policy().get_state()
        last_update = t.last_target_update
    assert last_update > 0
    with DQNTrainer(config) as t2:
        t2.restore(path)
        policy = t2.get_policy()
        assert t2.last_target_update == last_update and policy.epsilon == state["epsilon"]
        for k, v in state["target_weights"].items():
            np.testing.assert_array_equal(policy.get_target_weights()[k], v)
        t2.train()


def test_in_process_apex_trainer_pins_the_ladder_and_learns():
    config = {
        **TINY,
        "env": "CartPole-v1",
        "learning_starts": 64,
        "train_batch_size": 16,
        "min_step_time_s": 0.1,  # the learner thread gets time to learn in each step
        "timesteps_per_iteration": 256,
        "target_network_update_freq": 64,
    }
    with ApexTrainer(config) as t:
        before = t.get_weights()["default_policy"]
        result = train_until_done(t, lambda r: r["num_learner_updates"] > 0)
        policy = t.get_policy()
        assert policy.epsilon == pytest.approx(0.4) and policy.epsilon_pinned
        assert t.last_target_update > 0
        after = t.get_weights()["default_policy"]
    assert result["epsilon_min"] == result["epsilon_max"] == pytest.approx(0.4)
    assert result["num_learner_updates"] > 0 and result["timesteps_this_iter"] >= 256
    assert any(not np.array_equal(before[k], v) for k, v in after.items())


# -- with remote evaluators ----------------------------------------------------------------
REMOTE = {"num_evaluators": 2, "num_cpus_per_evaluator": 0.5, "sample_timeout_s": 120}


def _remote_targets(trainer) -> list[dict]:
    remotes = trainer.evaluators.remote_evaluators
    return trainer.evaluators.get(
        [e.apply.remote(lambda ev: ev.policy.get_target_weights()) for e in remotes]
    )


@pytest.mark.ray
def test_replay_updates_every_replicas_target(ray_session):
    config = {**LOCAL, **REMOTE, "target_network_update_freq": 8}
    with DQNTrainer(config) as t:
        t.train()
        # every step samples 2 x 4 rows, syncs weights, then updates all targets
        local = t.get_policy().get_target_weights()
        for remote in _remote_targets(t):
            for k, v in local.items():
                np.testing.assert_array_equal(remote[k], v)


@pytest.mark.ray
def test_async_dqn_trains_with_two_remote_evaluators(ray_session):
    config = {
        **TINY,
        **REMOTE,
        "env": "CartPole-v1",
        "optimizer": "async",
        "timesteps_per_iteration": 256,
        "target_network_update_freq": 64,
    }
    with DQNTrainer(config) as t:
        initial_target = t.get_policy().get_target_weights()
        before = t.get_weights()["default_policy"]
        results = [t.train() for _ in range(3)]
        after = t.get_weights()["default_policy"]
        remote_targets = _remote_targets(t)
    last = results[-1]
    assert last["num_gradients_applied"] > 0 and last["timesteps_total"] >= 3 * 256
    assert np.isfinite(last["learner/total_loss"]) and "learner/mean_q" in last
    assert any(not np.array_equal(before[k], v) for k, v in after.items())
    for remote in remote_targets:  # the replicas computing gradients refresh theirs too
        assert any(not np.array_equal(initial_target[k], v) for k, v in remote.items())


# -- learning ------------------------------------------------------------------------------
@pytest.mark.learning
@pytest.mark.timeout(300)
def test_dqn_learns_cartpole():
    # Defaults: double + dueling + 3-step + prioritized replay.  Seeds 0-2 reach 150 after
    # 18-20k env steps (~15 s of CPU).
    with DQNTrainer({"env": "CartPole-v1", "seed": SEED}) as trainer:
        config = trainer.config
        assert config.double_q and config.dueling and config.n_step == 3
        assert config.optimizer_config.prioritized_replay
        run = train_until(trainer, 150, 40_000)
    assert run.reached, run
    assert run.result["buffer_max_priority"] > 1.0


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_dqn_takes_the_apex_optimizer_directly(ray_session):
    # APEX is a preset: plain DQN with optimizer "apex" runs Ape-X with DQN's defaults
    # for it (its learning test, with tuned settings: tests/test_apex.py)
    config = {
        **TINY,
        "env": "CartPole-v1",
        "optimizer": "apex",
        **REMOTE,
        "learning_starts": 64,
        "min_step_time_s": 0.2,
    }
    with DQNTrainer(config) as trainer:
        assert trainer.config.optimizer_config.num_replay_shards == 2  # DQN's apex default
        for _ in range(3):
            result = trainer.train()
    assert result["epsilon_max"] == pytest.approx(0.4)
    assert result["epsilon_min"] == pytest.approx(0.4**8)
    assert result["num_learner_updates"] > 0 and result["num_weight_syncs"] > 0


def test_epsilon_reaches_the_logs(tmp_path):
    from hierl.loggers import read_results

    config = {**TINY, "env": "CartPole-v1", "timesteps_per_iteration": 200, "logdir": str(tmp_path)}
    with DQNTrainer(config) as trainer:
        result = trainer.train()
    (logged,) = read_results(tmp_path)
    assert logged["epsilon"] == result["epsilon"] < 1.0
