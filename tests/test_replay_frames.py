"""Frame-once replay storage: what is sampled equals what the plain (row) buffer returns."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierl.algorithms.registry import get_trainer_class
from hierl.checkpoint import load_checkpoint, save_checkpoint
from hierl.config import ConfigError
from hierl.optimizers.apex.replay_shard import ReplayShard
from hierl.optimizers.replay.buffer import ReplayBuffer
from hierl.optimizers.replay.frames import FrameStacks, is_frame_stack
from hierl.optimizers.replay.optimizer import ReplayConfig
from hierl.optimizers.replay.prioritized import PrioritizedReplayBuffer, make_replay_buffer
from hierl.postprocessing import compute_n_step
from hierl.sample_batch import SampleBatch as SB
from hierl.sample_batch import concat_samples
from hierl.tune.experiments import load_experiments
from tests.support import atari_env

REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(300)


class StackingEnv:
    """One evaluator's env as the replay buffer sees it: Gymnasium's frame stack
    (first frame repeated at a reset) over frames drawn from ``pool`` distinct frames
    (so equal frames recur across episodes) or at random, episodes of random length that
    end terminated or truncated."""

    def __init__(self, rng, stack, frame_shape, max_len, pool, pool_p=0.5):
        self.rng, self.stack, self.shape, self.max_len = rng, stack, frame_shape, max_len
        self.pool_p = pool_p
        self.pool = [self._random_frame() for _ in range(pool)]
        self.eps_id = int(rng.integers(1 << 30))
        self._reset()

    def _random_frame(self):
        return self.rng.integers(0, 256, self.shape, dtype=np.uint8)

    def _frame(self):
        if self.pool and self.rng.random() < self.pool_p:
            return self.pool[self.rng.integers(len(self.pool))].copy()
        return self._random_frame()

    def _reset(self):
        self.eps_id += 1
        self.frames = [self._frame()] * self.stack
        self.left = int(self.rng.integers(1, self.max_len + 1))

    def fragment(self, length, n_step, gamma=0.9):
        rows = {k: [] for k in ("obs", "new_obs", "terminateds", "truncateds", "eps_id")}
        for _ in range(length):
            new_frames = [*self.frames[1:], self._frame()]
            self.left -= 1
            end = self.left == 0
            terminated = end and bool(self.rng.random() < 0.5)
            for k, v in (
                ("obs", np.stack(self.frames)),
                ("new_obs", np.stack(new_frames)),
                ("terminateds", terminated),
                ("truncateds", end and not terminated),
                ("eps_id", self.eps_id),
            ):
                rows[k].append(v)
            self.frames = new_frames
            if end:
                self._reset()
        batch = SB({k: np.array(v) for k, v in rows.items()})
        batch[SB.ACTIONS] = self.rng.integers(0, 4, length)
        batch[SB.REWARDS] = self.rng.normal(size=length).astype(np.float32)
        return compute_n_step(batch, n_step, gamma) if n_step > 1 else batch


def assert_same_batches(a, b):
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@st.composite
def replay_runs(draw):
    return {
        "prioritized": draw(st.booleans()),
        "capacity": draw(st.integers(1, 40)),
        "stack": draw(st.integers(2, 4)),
        "n_step": draw(st.sampled_from([1, 3])),
        "evaluators": draw(st.integers(1, 3)),
        "max_len": draw(st.integers(1, 12)),
        "pool": draw(st.sampled_from([0, 3])),
        "fragments": draw(st.lists(st.integers(1, 15), min_size=1, max_size=14)),
        "seed": draw(st.integers(0, 2**16)),
    }


@settings(max_examples=80, deadline=None)
@given(replay_runs())
def test_frame_storage_returns_exactly_what_row_storage_returns(run):
    """Same insertions, same sampling RNG: every sampled column (obs and new_obs across
    episode boundaries, n-step windows and the ring's wrap-around, actions, rewards,
    terminateds/truncateds, weights, indexes) is identical, as are the priorities."""
    rng = np.random.default_rng(run["seed"])
    envs = [
        StackingEnv(rng, run["stack"], (5, 6), run["max_len"], run["pool"])
        for _ in range(run["evaluators"])
    ]
    cap, slots = run["capacity"], 2 * run["stack"]
    rows = make_replay_buffer(cap, run["prioritized"], alpha=0.7, seed=1, frame_storage="rows")
    # Room for every frame of every stored row: nothing is dropped early.
    if run["prioritized"]:
        frames = PrioritizedReplayBuffer(cap, alpha=0.7, seed=1, frame_capacity=4 * slots * cap)
    else:
        frames = ReplayBuffer(cap, seed=1, frame_capacity=4 * slots * cap)
    for i, length in enumerate(run["fragments"]):
        batch = envs[i % len(envs)].fragment(length, run["n_step"])
        priorities = rng.uniform(0.1, 2, length) if run["prioritized"] and i % 2 else None
        rows.add(batch, priorities)
        frames.add(batch, priorities)
        assert frames.stores_frames and not rows.stores_frames
        assert len(frames) == len(rows)
        a, b = rows.sample(16, beta=0.4), frames.sample(16, beta=0.4)
        assert_same_batches(a, b)
        td = rng.uniform(0.1, 3, 16)
        rows.update_priorities(a[SB.BATCH_INDEXES], td)
        frames.update_priorities(b[SB.BATCH_INDEXES], td)
    rows_stats, frame_stats = rows.stats(), frames.stats()
    assert frame_stats.pop("frame_capacity") == 4 * slots * cap
    assert frame_stats.pop("frames_written") <= slots * rows.num_added
    assert frame_stats == rows_stats


@pytest.mark.parametrize("pool", [0, 3])
def test_atari_like_episodes_store_about_one_frame_per_row_and_keep_capacity_rows(pool):
    """With ``pool``, one frame in 200 repeats one of a few, last seen long ago:
    reusing those must not drop the rows in between."""
    rng = np.random.default_rng(0)
    envs = [StackingEnv(rng, 4, (12, 12), 200, pool, pool_p=0.005) for _ in range(3)]
    buffer = make_replay_buffer(1000, prioritized=True, seed=0)
    rows = make_replay_buffer(1000, prioritized=True, seed=0, frame_storage="rows")
    for i in range(250):  # 3 evaluators' fragments of 16 rows, interleaved; wraps 4 times
        batch = envs[i % 3].fragment(16, n_step=3)
        buffer.add(batch)
        rows.add(batch)
        assert len(buffer) == len(rows)
    stats = buffer.stats()
    assert buffer.stores_frames and len(buffer) == 1000 and stats["num_added"] == 4000
    # One new frame per row, one more per episode start (~100 rows per episode).
    assert 4000 * 0.98 < stats["frames_written"] < 4000 * 1.03
    assert stats["frame_capacity"] == 1000 + 1000 // 16 + 32
    assert buffer.nbytes < 0.3 * rows.nbytes  # 8 frames a row stored whole, here ~1.1


@pytest.mark.parametrize("prioritized", [False, True])
def test_rows_whose_frames_were_overwritten_are_dropped_never_returned_wrong(prioritized):
    """Random stacks share no frames: a frame ring of 3 rows' frames keeps the newest
    rows that fit; every sampled row is still exactly a stored one."""
    rng = np.random.default_rng(1)
    buffer_class = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    # A ring of 3 rows' frames (2 stacks x 4 frames each).
    buffer = buffer_class(10, seed=0, frame_storage="frames", frame_capacity=24)
    inserted = {}
    for step in range(6):
        n = 4
        ids = np.arange(step * n, step * n + n)
        batch = SB(
            obs=rng.integers(0, 256, (n, 4, 5, 6), dtype=np.uint8),
            new_obs=rng.integers(0, 256, (n, 4, 5, 6), dtype=np.uint8),
            actions=ids,
        )
        inserted.update({int(i): (batch["obs"][j], batch["new_obs"][j]) for j, i in enumerate(ids)})
        buffer.add(batch)
        newest = int(ids[-1])
        assert 1 <= len(buffer) <= 3
        out = buffer.sample(64, beta=1.0)
        live = set(out[SB.ACTIONS].tolist())
        assert live <= set(range(newest - len(buffer) + 1, newest + 1))  # the newest rows
        for j, action in enumerate(out[SB.ACTIONS]):
            obs, new_obs = inserted[int(action)]
            np.testing.assert_array_equal(out["obs"][j], obs)
            np.testing.assert_array_equal(out["new_obs"][j], new_obs)
        if prioritized:  # an update of every ring row touches only the stored ones
            filled = min(10, buffer.num_added)
            buffer.update_priorities(np.arange(filled), np.full(filled, 5.0))
            assert np.count_nonzero(buffer.sum_tree[np.arange(10)]) == len(buffer)
            assert buffer.stats()["mean_priority"] == 5.0
    assert buffer.stats()["frames_written"] == 6 * 4 * 8


@pytest.mark.parametrize("prioritized", [False, True])
def test_frame_buffer_state_checkpoints_without_pickle_and_resumes(tmp_path, prioritized):
    rng = np.random.default_rng(2)
    env = StackingEnv(rng, 4, (6, 7), 9, 2)
    buffer = make_replay_buffer(30, prioritized, alpha=0.6, seed=3)
    for _ in range(5):
        buffer.add(env.fragment(11, n_step=3))
    buffer.sample(4)
    _, state = load_checkpoint(save_checkpoint(tmp_path / "b", {}, buffer.get_state()))
    twin = make_replay_buffer(30, prioritized, alpha=0.6, seed=99)
    twin.set_state(state)
    assert twin.stores_frames and twin.stats() == buffer.stats()
    for _ in range(4):  # storing and sampling go on identically
        batch = env.fragment(7, n_step=3)
        buffer.add(batch)
        twin.add(batch)
        assert_same_batches(buffer.sample(32, beta=0.5), twin.sample(32, beta=0.5))
    assert twin.stats() == buffer.stats()


def test_frame_storage_is_chosen_for_stacked_uint8_images_only():
    def batch(shape, dtype=np.uint8):
        return SB(obs=np.zeros((2, *shape), dtype), new_obs=np.zeros((2, *shape), dtype))

    assert is_frame_stack(batch((4, 84, 84)))
    assert not is_frame_stack(batch((84, 84, 3)))  # an image, not a stack
    assert not is_frame_stack(batch((4, 84, 84), np.float32))
    assert not is_frame_stack(batch((4,)))
    assert not is_frame_stack(SB(obs=np.zeros((2, 4, 84, 84), np.uint8)))  # no new_obs
    for shape, expected in (((4, 84, 84), True), ((84, 84, 3), False)):
        buffer = make_replay_buffer(4, prioritized=False)
        buffer.add(batch(shape))
        assert buffer.stores_frames is expected
    rows = make_replay_buffer(4, prioritized=False, frame_storage="rows")
    rows.add(batch((4, 84, 84)))
    assert not rows.stores_frames
    forced = make_replay_buffer(4, prioritized=False, frame_storage="frames")
    forced.add(batch((3, 2), np.float32))
    assert forced.stores_frames
    with pytest.raises(ValueError, match=r"frame_storage='frames' needs 'obs' and 'new_obs'"):
        make_replay_buffer(4, False, frame_storage="frames").add(SB(obs=np.zeros((2, 3))))
    with pytest.raises(ValueError, match=r"frame_storage must be one of .*got 'frame'"):
        make_replay_buffer(4, False, frame_storage="frame")
    stored = make_replay_buffer(4, False)
    stored.add(batch((4, 84, 84)))
    with pytest.raises(ValueError, match=r"column 'obs' has rows of shape \(4, 80, 80\)"):
        stored.add(batch((4, 80, 80)))
    with pytest.raises(ValueError, match="frame_capacity must hold one row's 8 frames"):
        FrameStacks(4, (4, 84, 84), np.uint8, frame_capacity=7)


def test_config_field_reaches_replay_and_apex_buffers():
    assert ReplayConfig().frame_storage == "auto"
    with pytest.raises(ConfigError, match="frame_storage"):
        ReplayConfig.from_dict({"frame_storage": "frame"})
    shard = ReplayShard(8, True, 0.6, 1, seed=0, frame_storage="rows")
    shard.add_batch(
        SB(obs=np.zeros((2, 4, 9, 9), np.uint8), new_obs=np.zeros((2, 4, 9, 9), np.uint8))
    )
    assert not shard.buffer.stores_frames


# -- DQN and Ape-X on the tuned Pong files, with the Atari-shaped test env --------------
def test_the_tuned_dqn_pong_file_has_the_zoo_agents_settings():
    """``pong-dqn.yaml`` against the zoo agent's ``config.yml``
    (``benchmarks/published/sb3-zoo-dqn-pong/README.md``).  SB3's DQN replays uniformly
    and takes one gradient step on 32 rows every 4 env steps (``train_freq: 4``,
    ``gradient_steps: 1``): 8 rows replayed per row sampled, where DQN's default here
    (64-row batches) is 16."""
    spec = load_experiments(REPO_ROOT / "examples/tuned/pong-dqn.yaml")["pong-dqn"]
    config = get_trainer_class(spec.run).config_class.from_dict(spec.config)
    opt = config.optimizer_config
    updates_per_env_step = opt.replay_ratio / opt.train_batch_size
    assert (opt.train_batch_size, updates_per_env_step) == (32, 1 / 4)
    assert not opt.prioritized_replay
    assert (opt.buffer_size, opt.learning_starts) == (10_000, 100_000)
    assert (config.lr, config.gamma, config.n_step, config.grad_clip) == (1e-4, 0.99, 1, 10.0)
    assert not config.double_q and not config.dueling
    assert config.target_network_update_freq == 1000
    assert (config.initial_epsilon, config.final_epsilon) == (1.0, 0.01)
    assert config.epsilon_timesteps == 1_000_000


@pytest.mark.parametrize(
    ("path", "name", "shrink", "frames_per_row"),
    [
        ("examples/tuned/pong-dqn.yaml", "pong-dqn", {}, 1.1),
        # In-process: no evaluator or shard actors, the shards are plain objects; the
        # shards get every other 16-step fragment of each of the 4 sub-envs.
        ("examples/tuned/pong-apex.yaml", "pong-apex", {"num_evaluators": 0}, 1 + 3 / 16 + 0.1),
    ],
)
def test_tuned_pong_files_store_frames_once_and_train(path, name, shrink, frames_per_row):
    """The tuned files' replay stores each Atari frame once (one per step, one per
    episode start (a life here: 30 steps), and for Ape-X 3 per fragment), keeps
    ``capacity`` rows, and DQN / Ape-X DQN train on it."""
    atari_env.register()
    spec = load_experiments(REPO_ROOT / path)[name]
    config = {**spec.config, **shrink, "env": atari_env.ENV_ID, "seed": 0}
    config.pop("evaluation_interval", None)
    config["timesteps_per_iteration"] = 0
    config["model"] = {"conv_filters": [[8, 8, 4], [16, 4, 2]], "hiddens": [16]}
    config["optimizer_config"] = {
        **config["optimizer_config"],
        "buffer_size": 600,
        "learning_starts": 200,
        "train_batch_size": 16,
    }
    if name == "pong-apex":
        config["optimizer_config"]["min_step_time_s"] = 0.0
    trainer = get_trainer_class(spec.run)(config)
    try:
        before = {k: v.copy() for k, v in trainer.get_policy().get_weights().items()}
        result = {}
        while result.get("timesteps_total", 0) < 800:  # past a full ring
            result = trainer.train()
        opt = trainer.optimizer
        buffers = [s.buffer for s in opt.replay.shards] if name == "pong-apex" else [opt.buffer]
        for buffer in buffers:
            stats = buffer.stats()
            assert buffer.stores_frames and len(buffer) == buffer.capacity
            added = stats["num_added"]
            assert added < stats["frames_written"] < frames_per_row * added
        after = trainer.get_policy().get_weights()
        assert any(not np.array_equal(after[k], v) for k, v in before.items())
        assert all(np.isfinite(v).all() for v in after.values())
    finally:
        trainer.stop()


def test_ape_x_shards_grow_their_frame_ring_instead_of_dropping_rows():
    """Ape-X routes an evaluator's fragments to its shards in turn, so a shard never has
    the previous fragment: each 16-step fragment's first stack is 3 frames more.  The
    frame ring grows to fit; no row is dropped."""
    rng = np.random.default_rng(3)
    envs = [StackingEnv(rng, 4, (9, 9), 300, 0) for _ in range(4)]  # 4 sub-envs
    shards = [make_replay_buffer(1000, prioritized=True, seed=i) for i in range(2)]
    for i in range(300):
        batch = concat_samples([env.fragment(16, n_step=3) for env in envs])
        shard = shards[i % 2]
        shard.add(batch)
        assert len(shard) == min(1000, shard.num_added)
    for shard in shards:
        stats = shard.stats()
        assert 1000 + 1000 // 16 + 32 < stats["frame_capacity"] <= 1500 + 64
        assert stats["frames_written"] > 1.15 * stats["num_added"]


def test_replay_memory_benchmark_runs_small(monkeypatch):
    """``benchmarks/replay_memory.py``: its synthetic rows are frame stacks (stored
    about one frame a row) and a small run reports every figure."""
    bench_dir = str(REPO_ROOT / "benchmarks")
    sys.path.insert(0, bench_dir)
    try:
        bench = importlib.import_module("replay_memory")
    finally:
        sys.path.remove(bench_dir)
    monkeypatch.setattr(bench, "record", lambda *args: None)
    env = bench.SyntheticAtari(np.random.default_rng(0), 3, 5)
    seen = 0
    for _ in range(6):
        batch = env.fragment(4)  # ends early at an episode's end
        obs, new_obs = batch[SB.OBS], batch[SB.NEW_OBS]
        np.testing.assert_array_equal(obs[:, 1:], new_obs[:, :-1])  # one frame apart
        np.testing.assert_array_equal(obs[1:], new_obs[:-1])
        if seen == 0:  # a reset stack repeats its frame
            assert (obs[0] == obs[0, :1]).all()
        seen = 0 if batch[SB.TERMINATEDS][-1] else seen + len(obs)
        assert batch[SB.TERMINATEDS][:-1].sum() == 0
    figures = bench.main(["--rows", "3000", "--samples", "20", "--episode-len", "50", "90"])
    assert figures["rows_stored"] == 3000
    assert 1.0 < figures["frames_written"] / figures["rows_added"] < 1.03
    assert figures["naive_projected_gib"] > 5 * figures["buffer_nbytes_gib"]
    assert figures["sample32_ms"]["median"] > 0
