"""Segment trees, replay buffers, the ``replay`` optimizer and DQN through it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hierl.optimizers.replay  # noqa: F401  (registers "replay")
from hierl.algorithms.dqn import DQNConfig, DQNPolicy, DQNTrainer
from hierl.checkpoint import load_checkpoint, save_checkpoint
from hierl.config import ConfigError
from hierl.evaluators import EvaluatorSpec, PolicyEvaluator
from hierl.optimizers.replay import ReplayOptimizer
from hierl.optimizers.replay.buffer import ReplayBuffer
from hierl.optimizers.replay.prioritized import (
    PrioritizedReplayBuffer,
    make_replay_buffer,
)
from hierl.optimizers.replay.segment_tree import MinSegmentTree, SumSegmentTree
from hierl.policy_graph import GlobalVars
from hierl.sample_batch import DEFAULT_POLICY_ID
from hierl.sample_batch import SampleBatch as SB
from tests.support.counting_env import CountingEnv
from tests.support.helpers import RESULT_KEYS
from tests.support.learning_runs import SEED, train_until

pytestmark = pytest.mark.timeout(120)
SETTINGS = settings(max_examples=150, deadline=None)


def rows(ids, **extra) -> SB:
    """A batch whose ``obs`` rows are ``[id, -id]`` (so tests can tell rows apart)."""
    ids = np.asarray(ids, dtype=np.float32)
    return SB(obs=np.stack([ids, -ids], 1), rewards=ids, terminateds=ids > 5, **extra)


# -- segment trees -----------------------------------------------------------------------
@st.composite
def tree_writes(draw):
    """A capacity and a list of vectorised writes (indexes may repeat within one write)."""
    capacity = draw(st.integers(1, 40))
    index = st.integers(0, capacity - 1)
    write = st.lists(st.tuples(index, st.integers(0, 10**6)), min_size=1, max_size=12)
    return capacity, draw(st.lists(write, min_size=1, max_size=6))


@SETTINGS
@given(tree_writes(), st.data())
def test_segment_trees_match_brute_force(case, data):
    capacity, writes = case
    total, low = SumSegmentTree(capacity), MinSegmentTree(capacity)
    ref_sum, ref_min = np.zeros(capacity), np.full(capacity, np.inf)
    for write in writes:
        idx = np.array([i for i, _ in write])
        vals = np.array([v for _, v in write], dtype=np.float64)
        total[idx] = vals
        low[idx] = vals
        for i, v in write:  # documented: a repeated index keeps its LAST value
            ref_sum[i], ref_min[i] = v, v
    np.testing.assert_array_equal(total[np.arange(capacity)], ref_sum)
    np.testing.assert_array_equal(low[np.arange(capacity)], ref_min)
    assert total.sum() == ref_sum.sum() and low.min() == ref_min.min()
    for _ in range(5):
        start = data.draw(st.integers(0, capacity))
        end = data.draw(st.integers(start, capacity))
        assert total.sum(start, end) == ref_sum[start:end].sum()
        assert low.min(start, end) == (ref_min[start:end].min() if end > start else np.inf)


@SETTINGS
@given(
    st.lists(st.integers(0, 1000), min_size=1, max_size=50),
    st.lists(st.floats(0.0, 1.1), min_size=1, max_size=20),
)
def test_find_prefixsum_idx_matches_searchsorted(leaves, fractions):
    tree = SumSegmentTree(len(leaves))
    tree[np.arange(len(leaves))] = leaves
    prefix = np.array(fractions) * sum(leaves)
    expected = np.searchsorted(np.cumsum(leaves), prefix, side="right")
    got = tree.find_prefixsum_idx(prefix)
    np.testing.assert_array_equal(got, np.minimum(expected, len(leaves) - 1))
    if sum(leaves) > 0:  # a prefix sum inside the total never lands on a zero leaf
        inside = prefix < sum(leaves)
        assert (np.asarray(leaves)[got[inside]] > 0).all()


def test_segment_tree_rejects_bad_arguments():
    tree = SumSegmentTree(4)
    with pytest.raises(IndexError, match=r"\[4\] out of range \[0, 4\)"):
        tree[np.array([1, 4])] = 1.0
    with pytest.raises(ValueError, match="range"):
        tree.sum(3, 2)
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.find_prefixsum_idx(np.array([-1.0]))
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        MinSegmentTree(0)


# -- replay buffers ----------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(
    priorities=st.lists(st.floats(0.05, 20.0), min_size=2, max_size=12),
    alpha=st.floats(0.0, 1.5),
    seed=st.integers(0, 2**16),
)
def test_prioritized_sampling_frequencies_follow_p_to_the_alpha(priorities, alpha, seed):
    priorities = np.array(priorities)
    n = len(priorities)
    buffer = PrioritizedReplayBuffer(n, alpha=alpha, seed=seed)
    buffer.add(rows(range(n)), priorities)
    counts = np.zeros(n)
    draws = 40 * 1000
    for _ in range(40):
        np.add.at(counts, buffer.sample(1000)[SB.BATCH_INDEXES], 1)
    q = priorities**alpha / (priorities**alpha).sum()
    # Stratified sampling varies less than multinomial: a 5-sigma multinomial bound
    # (plus a floor for rows so rare that sigma is below one draw).
    bound = 5 * np.sqrt(q * (1 - q) / draws) + 2 / draws
    np.testing.assert_array_less(np.abs(counts / draws - q), bound)


def test_importance_weights_closed_form():
    priorities = np.array([1.0, 2.0, 4.0, 8.0])
    alpha, beta = 0.5, 0.7
    buffer = PrioritizedReplayBuffer(8, alpha=alpha, seed=1)
    buffer.add(rows(range(4)), priorities)
    batch = buffer.sample(64, beta=beta)
    idx = batch[SB.BATCH_INDEXES]
    assert set(idx) == {0, 1, 2, 3}  # stratified: even the rarest row appears
    # w_i = (N P(i))^-beta / max_j w_j = (p_i^alpha / p_min^alpha)^-beta
    expected = (priorities[idx] ** alpha / priorities.min() ** alpha) ** -beta
    np.testing.assert_allclose(batch[SB.PRIO_WEIGHTS], expected, rtol=1e-6)
    assert batch[SB.PRIO_WEIGHTS].dtype == np.float32 and batch[SB.PRIO_WEIGHTS].max() == 1.0
    np.testing.assert_array_equal(batch[SB.OBS][:, 0], idx)  # rows match their indexes
    np.testing.assert_array_equal(buffer.sample(8, beta=0.0)[SB.PRIO_WEIGHTS], 1.0)


def test_new_rows_enter_at_max_priority_and_updates_move_it():
    buffer = PrioritizedReplayBuffer(10, alpha=1.0)
    buffer.add(rows([0, 1]), np.array([3.0, 0.5]))
    buffer.add(rows([2]))
    assert buffer.sum_tree[2] == 3.0 and buffer.max_priority == 3.0
    buffer.update_priorities(np.array([1, 1, 0]), np.array([7.0, 9.0, 2.0]))  # last wins
    assert buffer.sum_tree[np.arange(3)].tolist() == [2.0, 9.0, 3.0]
    assert buffer.min_tree.min(0, 3) == 2.0
    assert buffer.stats()["max_priority"] == 9.0 and buffer.stats()["mean_priority"] == 14 / 3


@pytest.mark.parametrize("prioritized", [False, True])
def test_ring_buffer_keeps_newest_capacity_rows(prioritized):
    buffer = make_replay_buffer(5, prioritized, seed=0)
    for start in (0, 3, 6):
        buffer.add(rows(range(start, start + 3)))
    assert len(buffer) == 5 and buffer.num_added == 9
    assert set(buffer.sample(500)[SB.OBS][:, 0]) == {4, 5, 6, 7, 8}
    buffer.add(rows(range(100, 112)))  # longer than the buffer: its last 5 rows
    assert set(buffer.sample(500)[SB.OBS][:, 0]) == set(range(107, 112))
    buffer.add(rows([200]))  # evicts the oldest row, 107
    assert set(buffer.sample(500)[SB.OBS][:, 0]) == {108, 109, 110, 111, 200}
    assert buffer.stats()["size"] == 5 and buffer.stats()["num_added"] == 22


def test_buffer_stores_decompressed_rows_and_leaves_the_batch_alone():
    batch = rows(range(4)).compress(SB.OBS)
    buffer = ReplayBuffer(4, seed=0)
    buffer.add(batch)
    assert batch.is_compressed(SB.OBS)
    out = buffer.sample(16)
    np.testing.assert_array_equal(out[SB.OBS][:, 1], -out[SB.OBS][:, 0])
    np.testing.assert_array_equal(out[SB.PRIO_WEIGHTS], np.ones(16, np.float32))


@pytest.mark.parametrize(
    "bad", [np.array([1.0, np.nan, 1.0]), np.array([1.0, 0.0, 1.0]), [1.0, -2.0, 1.0], [1.0, 1.0]]
)
def test_bad_priorities_raise(bad):
    buffer = PrioritizedReplayBuffer(8)
    with pytest.raises(ValueError, match="priorities"):
        buffer.add(rows(range(3)), bad)
    assert len(buffer) == 0  # nothing stored
    buffer.add(rows(range(3)))
    with pytest.raises(ValueError, match="priorities"):
        buffer.update_priorities(np.arange(3), bad)
    with pytest.raises(ValueError, match=r"not stored rows \[0, 3\)"):
        buffer.update_priorities(np.array([5]), np.array([1.0]))


def test_bad_columns_and_empty_buffer_raise():
    buffer = ReplayBuffer(8)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(4)
    buffer.add(rows(range(3)))
    with pytest.raises(ValueError, match=r"missing \['terminateds'\], unexpected \['dones'\]"):
        buffer.add(SB(obs=np.zeros((2, 2), np.float32), rewards=np.zeros(2), dones=np.zeros(2)))
    with pytest.raises(ValueError, match="column 'obs' has rows of shape"):
        buffer.add(SB(rows(range(2)), obs=np.zeros((2, 3), np.float32)))
    with pytest.raises(ValueError, match="num_items"):
        buffer.sample(0)


@pytest.mark.parametrize("prioritized", [False, True])
def test_buffer_state_checkpoints_without_pickle_and_resumes(tmp_path, prioritized):
    buffer = make_replay_buffer(6, prioritized, alpha=0.7, seed=3)
    buffer.add(rows(range(8)), np.arange(1.0, 9.0) if prioritized else None)
    buffer.sample(4)
    _, state = load_checkpoint(save_checkpoint(tmp_path / "b", {}, buffer.get_state()))
    twin = make_replay_buffer(6, prioritized, alpha=0.7, seed=99)
    twin.set_state(state)
    assert twin.stats() == buffer.stats()
    a, b = buffer.sample(32, beta=0.5), twin.sample(32, beta=0.5)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    with pytest.raises(ValueError, match="capacity 6, this buffer 7"):
        make_replay_buffer(7, prioritized).set_state(state)


# -- the replay optimizer, in-process -----------------------------------------------------
def local_setup(**optimizer_config):
    """A local evaluator (4 rows per sample) and a replay optimizer over it."""
    config = DQNConfig.from_dict({"env": CountingEnv, "model": {"hiddens": [8]}, "lr": 1e-2})
    evaluator = PolicyEvaluator(
        EvaluatorSpec.of(
            CountingEnv,
            DQNPolicy,
            config,
            env_config={"length": 6},
            rollout_fragment_length=4,
            seed=0,
        )
    )
    base = {"train_batch_size": 4, "learning_starts": 10, "buffer_size": 100}
    return evaluator, ReplayOptimizer(evaluator, config={**base, **optimizer_config})


def test_nothing_is_learned_before_learning_starts():
    evaluator, opt = local_setup()
    before = evaluator.policy.get_weights()
    for _ in range(2):
        assert opt.step() == {}
    assert opt.num_updates == 0 and opt.num_steps_trained == 0 and len(opt.buffer) == 8
    for k, v in evaluator.policy.get_weights().items():
        np.testing.assert_array_equal(v, before[k])
    stats = opt.step()  # 12 rows >= learning_starts
    assert opt.num_updates == 1 and {"total_loss", "mean_q"} <= set(stats[DEFAULT_POLICY_ID])
    assert any(not np.array_equal(v, before[k]) for k, v in evaluator.policy.get_weights().items())
    assert evaluator.policy.global_timestep == opt.num_steps_sampled == 12


def test_learning_starts_past_the_buffer_size_waits_for_rows_sampled_in_the_run():
    # SB3's zoo DQN on Pong: learning_starts 100k with a 10k buffer.  Here 4 rows a step
    # into a 6-row buffer: it is full after 2 steps, learning starts after 5 (20 rows).
    settings = {"buffer_size": 6, "learning_starts": 20, "checkpoint_replay_buffer": True}
    evaluator, opt = local_setup(**settings)
    before = evaluator.policy.get_weights()
    for _ in range(4):
        assert opt.step() == {}
    assert len(opt.buffer) == 6 and opt.buffer.num_added == 16 and opt.num_updates == 0
    for k, v in evaluator.policy.get_weights().items():
        np.testing.assert_array_equal(v, before[k])
    assert opt.step() and opt.num_updates == 1
    # counted over the run: a restore keeps the count; without the buffer it refills to
    # min(learning_starts, buffer_size) = 6 rows first (2 steps), not 20 rows again
    _, resumed = local_setup(**settings)
    resumed.restore(opt.save())
    assert resumed.num_steps_sampled == 20
    assert resumed.step() and resumed.num_updates == 2
    _, refilled = local_setup(**settings)
    refilled.restore({k: v for k, v in opt.save().items() if k != "buffer"})
    assert refilled.num_steps_sampled == 20 and len(refilled.buffer) == 0
    assert refilled.step() == {} and refilled.num_updates == 1
    assert refilled.step() and refilled.num_updates == 2
    # frame storage may drop the oldest rows early (their frames were overwritten): the
    # buffer then holds fewer than buffer_size rows, and learning must go on
    refilled.buffer._live_start = refilled.buffer.num_added + 2  # the next add keeps 2
    assert refilled.step() and refilled.num_updates == 3 and len(refilled.buffer) == 2


@pytest.mark.parametrize(
    ("replay_ratio", "updates_per_step"),
    [(1.0, [1, 1, 1, 1]), (2.5, [2, 3, 2, 3]), (0.1, [1, 1, 1, 1]), (4.0, [4, 4, 4, 4])],
)
def test_updates_per_step_follow_replay_ratio(replay_ratio, updates_per_step):
    _, opt = local_setup(learning_starts=4, replay_ratio=replay_ratio)
    got = []
    for _ in updates_per_step:
        before = opt.num_updates
        opt.step()
        got.append(opt.num_updates - before)
    assert got == updates_per_step  # 4 rows/step, 4 rows/update: ratio updates, >= 1
    assert opt.num_steps_trained == opt.num_steps_replayed == 4 * sum(got)
    stats = opt.stats()
    assert stats["num_updates"] == sum(got) and stats["buffer_size"] == 16
    assert {"sample_time_ms", "replay_time_ms", "learn_time_ms", "sync_time_ms"} <= set(stats)


def test_priorities_come_from_td_errors():
    evaluator, opt = local_setup(
        learning_starts=4, prioritized_replay_alpha=0.5, prioritized_replay_eps=0.01
    )
    seen = []
    learn = evaluator.policy.learn_on_replay_batch

    def spy(batch):
        result = learn(batch)
        seen.append((batch[SB.BATCH_INDEXES].copy(), result.td_error))
        return result

    evaluator.policy.learn_on_replay_batch = spy
    for _ in range(3):
        opt.step()
        idx, td = seen[-1]
        assert td is not None and td.shape == idx.shape
        np.testing.assert_allclose(opt.buffer.sum_tree[idx], (np.abs(td) + 0.01) ** 0.5)
    assert opt.buffer.stats()["num_sampled"] == 4 * len(seen)


def test_beta_anneals_linearly_in_sampled_steps():
    _, opt = local_setup(
        prioritized_replay_beta=0.4,
        final_prioritized_replay_beta=1.0,
        prioritized_replay_beta_annealing_timesteps=8,
    )
    betas = []
    for _ in range(3):
        opt.step()
        betas.append(opt.stats()["prioritized_replay_beta"])
    assert betas == pytest.approx([0.7, 1.0, 1.0])


def test_uniform_replay_learns_without_priorities():
    _, opt = local_setup(prioritized_replay=False, learning_starts=4)
    opt.step()
    assert type(opt.buffer) is ReplayBuffer and opt.num_updates == 1
    assert "prioritized_replay_beta" not in opt.stats()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("learning_starts", 0, r"learning_starts.*must be >= 1"),
        ("replay_ratio", 0.0, "replay_ratio.*must be > 0"),
        ("prioritized_replay_eps", 0.0, "prioritized_replay_eps"),
        ("replay_ration", 1.0, "did you mean 'replay_ratio'"),
    ],
)
def test_bad_config_is_named(key, value, message):
    with pytest.raises(ConfigError, match=message):
        local_setup(**{key: value})


# -- the DQN policy ----------------------------------------------------------------------
def test_q_targets_bootstrap_on_truncation_not_termination():
    config = DQNConfig.from_dict({"gamma": 0.5, "model": {"hiddens": [8]}})
    env = CountingEnv()
    policy = DQNPolicy(env.observation_space, env.action_space, config)
    obs = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    new_obs = obs + 1
    batch = SB(
        obs=obs,
        new_obs=new_obs,
        actions=np.array([0, 1]),
        rewards=np.array([1.0, 1.0], np.float32),
        terminateds=np.array([True, False]),
        truncateds=np.array([False, True]),
    )
    with torch.no_grad():
        q = policy.model(torch.as_tensor(obs))[0].numpy()
        q_next_online = policy.model(torch.as_tensor(new_obs))[0].numpy()
        q_next_target = policy.target_model(torch.as_tensor(new_obs))[0].numpy()
    boot = q_next_target[1, q_next_online[1].argmax()]
    expected = np.abs([q[0, 0] - 1.0, q[1, 1] - (1.0 + 0.5 * boot)])
    np.testing.assert_allclose(policy.compute_td_errors(batch), expected, rtol=1e-5)


def test_epsilon_schedule_and_pinning():
    env = CountingEnv()
    config = DQNConfig(epsilon_timesteps=100, final_epsilon=0.1)
    policy = DQNPolicy(env.observation_space, env.action_space, config)
    assert policy.epsilon == 1.0
    policy.on_global_var_update(GlobalVars(timestep=50))
    assert policy.epsilon == pytest.approx(0.55)
    greedy = policy.compute_actions(np.zeros((64, 2), np.float32), explore=False)[0]
    assert len(set(greedy)) == 1
    policy.set_exploration_scale(0.0)
    policy.on_global_var_update(GlobalVars(timestep=1000))
    assert policy.epsilon == 0.0
    np.testing.assert_array_equal(policy.compute_actions(np.zeros((64, 2), np.float32))[0], greedy)
    with pytest.raises(ValueError, match="epsilon must be in"):
        policy.set_exploration_scale(1.5)


def test_dqn_trainer_checkpoint_keeps_counters_target_and_epsilon(tmp_path):
    config = {
        "env": "CartPole-v1",
        "timesteps_per_iteration": 0,  # one optimizer step (4 rows) per train()
        "model": {"hiddens": [8]},
        "rollout_fragment_length": 4,
        "num_envs_per_evaluator": 1,
        "target_network_update_freq": 1000,
        "optimizer_config": {"learning_starts": 8},
    }
    with DQNTrainer(config) as t:
        for _ in range(4):
            t.train()
        path = t.save(tmp_path / "q")
        state = t.get_policy().get_state()
        updates = t.optimizer.num_updates
    with DQNTrainer(config) as t2:
        t2.restore(path)
        assert t2.optimizer.num_updates == updates == 3  # rows 8, 12, 16 >= learning_starts
        policy = t2.get_policy()
        # the policy's own update count: Adam's step of every parameter
        adam_steps = {int(s["step"]) for s in policy.optimizer.state.values()}
        assert policy.epsilon == state["epsilon"] < 1.0 and adam_steps == {3}
        for k, v in state["target_weights"].items():
            np.testing.assert_array_equal(policy.target_model.state_dict()[k].numpy(), v)


# -- through a Trainer with remote evaluators ---------------------------------------------
@pytest.mark.ray
@pytest.mark.timeout(300)
def test_dqn_trainer_with_two_remote_evaluators_syncs_weights_and_epsilon(ray_session):
    config = {
        "env": "CartPole-v1",
        "timesteps_per_iteration": 0,  # one optimizer step (16 rows) per train()
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
        "num_envs_per_evaluator": 2,
        "rollout_fragment_length": 4,
        "train_batch_size": 32,
        "model": {"hiddens": [8]},
        "optimizer_config": {"learning_starts": 32, "replay_ratio": 1.0},  # 1 update per step
    }
    with DQNTrainer(config) as t:
        results = [t.train() for _ in range(3)]
        remotes = t.evaluators.remote_evaluators
        weights = t.evaluators.get([e.get_weights.remote() for e in remotes])
        epsilons = t.evaluators.get([e.apply.remote(_epsilon) for e in remotes])
        local = t.get_policy()
        for w in weights:
            for k, v in local.get_weights().items():
                np.testing.assert_array_equal(w["default_policy"][k], v)
        assert epsilons == [local.epsilon] * 2 and local.epsilon < 1.0
    assert set(results[-1]) >= RESULT_KEYS | {"num_updates", "buffer_size", "replay_time_ms"}
    assert [r["timesteps_total"] for r in results] == [16, 32, 48]  # 2 evaluators x 2 envs x 4
    assert [r["num_updates"] for r in results] == [0, 1, 2]


def _epsilon(evaluator) -> float:
    return evaluator.policy.epsilon


@pytest.mark.ray
@pytest.mark.learning
@pytest.mark.timeout(300)
def test_replay_learns_cartpole_with_two_evaluators(ray_session):
    # Double DQN with 1-step targets and a plain head (2 envs x 8 steps per evaluator,
    # batches of 64, gamma 0.98, the target copied every 800 env steps = 100 updates) with
    # 8 rows replayed per sampled step; one optimizer step (32 env steps) per train().
    # Seeds 0, 1, 2 pass 150 after 581-661 iterations (~20k env steps, ~2.4k updates;
    # 11-13 s here).
    config = {
        "env": "CartPole-v1",
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
        "num_envs_per_evaluator": 2,
        "rollout_fragment_length": 8,
        "timesteps_per_iteration": 0,
        "lr": 2e-3,
        "gamma": 0.98,
        "n_step": 1,
        "dueling": False,
        "target_network_update_freq": 800,
        "seed": SEED,
        "optimizer_config": {"prioritized_replay": True, "replay_ratio": 8.0},
    }
    with DQNTrainer(config) as t:
        run = train_until(t, 150, 1500, unit="training_iteration")
    assert run.reached, run
    assert run.result["num_updates"] > 0 and run.result["buffer_max_priority"] > 1.0


# -- initial priorities: max priority (Schaul et al. Alg. 1) or worker-side (Ape-X) -------
def _count_compute_td_errors(policy) -> list[np.ndarray]:
    """Wrap ``policy.compute_td_errors`` to record what it returns (one entry per call)."""
    calls: list[np.ndarray] = []
    compute = policy.compute_td_errors

    def recording(batch):
        out = compute(batch)
        calls.append(np.array(out))
        return out

    policy.compute_td_errors = recording
    return calls


def test_replay_inserts_new_rows_at_the_max_priority_by_default():
    evaluator, opt = local_setup(learning_starts=100, prioritized_replay_alpha=1.0)
    calls = _count_compute_td_errors(evaluator.policy)
    opt.step()
    assert opt.buffer.get_state()["priorities"].tolist() == [1.0] * 4  # the initial max
    opt.buffer.update_priorities(np.array([0, 1]), np.array([5.0, 0.25]))
    opt.step()
    priorities = opt.buffer.get_state()["priorities"]
    assert priorities[4:].tolist() == [5.0] * 4  # the max seen so far, not a TD error
    assert calls == []  # no extra target-network pass per sampled batch
    # also once learning has started: priorities come only from the learner's TD errors
    _, learning = local_setup(learning_starts=4)
    learning_calls = _count_compute_td_errors(learning.local_evaluator.policy)
    for _ in range(3):
        learning.step()
    assert learning.num_updates == 3 and learning_calls == []


def test_worker_side_prioritization_uses_the_policy_td_priorities():
    from hierl.optimizers.apex import ApexConfig
    from hierl.optimizers.replay import ReplayConfig

    assert ApexConfig().initial_priorities_on_workers  # Ape-X keeps evaluator priorities
    assert not ReplayConfig().initial_priorities_on_workers
    evaluator, opt = local_setup(
        learning_starts=100,
        prioritized_replay_alpha=1.0,
        worker_side_prioritization=True,
        prioritized_replay_eps=0.01,
    )
    calls = _count_compute_td_errors(evaluator.policy)
    for _ in range(2):
        opt.step()
    assert len(calls) == 2
    expected = np.concatenate(calls) + 0.01  # the optimizer's eps on the policy's |TD|
    assert not np.allclose(expected, 1.0)  # genuinely |TD| + eps, not the max priority
    np.testing.assert_allclose(opt.buffer.get_state()["priorities"], expected)
    # uniform replay ignores the option: no priorities to compute
    evaluator, uniform = local_setup(
        learning_starts=100, prioritized_replay=False, worker_side_prioritization=True
    )
    uniform_calls = _count_compute_td_errors(evaluator.policy)
    uniform.step()
    assert uniform_calls == []
