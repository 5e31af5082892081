"""Offline data: output round trip, durable writes, the reader, bad input, OPE math."""

from __future__ import annotations

import math
import re

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierl.algorithms.marwil import BCTrainer
from hierl.algorithms.off_policy_estimation import estimate
from hierl.algorithms.pg import PGTrainer
from hierl.config import ConfigError
from hierl.evaluators.offline import (
    OfflineDataError,
    OutputWriter,
    ParquetInput,
    batch_to_table,
    iter_episodes,
    list_files,
)
from hierl.evaluators.offline import writer as writer_module
from hierl.evaluators.offline.reader import RayDataInput, open_file, read_file
from hierl.sample_batch import MultiAgentBatch, SampleBatch

CARTPOLE_SPACES = {
    "default_policy": (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))
}


def read_all(path) -> SampleBatch:
    """Every row under ``path``, file by file in name order."""
    return SampleBatch.concat_samples([read_file(open_file(f)) for f in list_files(path)])


def assert_batches_equal(a: SampleBatch, b: SampleBatch) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        assert a[k].shape == b[k].shape, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def numbered_batch(start: int, n: int) -> SampleBatch:
    """Rows whose ``t`` column numbers them globally (to check what a reader hands out)."""
    idx = np.arange(start, start + n)
    return SampleBatch(
        obs=np.repeat(idx[:, None], 4, axis=1).astype(np.float32),
        actions=(idx % 2).astype(np.int64),
        rewards=np.ones(n, np.float32),
        terminateds=np.zeros(n, bool),
        truncateds=np.zeros(n, bool),
        eps_id=idx // 50,
        t=idx,
    )


def write_numbered(path, sizes, max_file_size=1) -> int:
    w = OutputWriter(path, CARTPOLE_SPACES, max_file_size=max_file_size)
    start = 0
    for n in sizes:
        w.write(numbered_batch(start, n))
        start += n
    w.close()
    return start


# -- output ------------------------------------------------------------------------------
def test_sampled_batches_read_back_equal(tmp_path):
    config = {"env": "CartPole-v1", "train_batch_size": 300, "num_envs_per_evaluator": 2}
    with PGTrainer({**config, "output": str(tmp_path), "output_max_file_size": 10**6}) as t:
        sampled = [t.local_evaluator.sample() for _ in range(3)]
    assert_batches_equal(read_all(tmp_path), SampleBatch.concat_samples(sampled))
    assert len(list_files(tmp_path)) == 1  # three batches rolled into one file on stop


def test_raw_output_is_written_before_postprocessing(tmp_path):
    config = {"env": "CartPole-v1", "train_batch_size": 200, "output": str(tmp_path)}
    with PGTrainer({**config, "output_postprocessed": False}) as t:
        batch = t.local_evaluator.sample()
    raw = read_all(tmp_path)
    assert SampleBatch.ADVANTAGES in batch and SampleBatch.ADVANTAGES not in raw
    np.testing.assert_array_equal(raw[SampleBatch.OBS], batch[SampleBatch.OBS])


def test_uint8_images_and_multi_agent_batches_round_trip(tmp_path):
    image = gym.spaces.Box(0, 255, (6, 5, 3), np.uint8)
    spaces = {"a": (image, gym.spaces.Discrete(3)), "b": CARTPOLE_SPACES["default_policy"]}
    rng = np.random.default_rng(0)
    a = SampleBatch(
        obs=rng.integers(0, 256, (7, 6, 5, 3), dtype=np.uint8),
        actions=rng.integers(0, 3, 7),
        rewards=rng.normal(size=7).astype(np.float32),
        action_dist_inputs=rng.normal(size=(7, 3)).astype(np.float64),
    )
    a.compress(bulk=True)  # written decompressed
    b = numbered_batch(0, 5)
    w = OutputWriter(tmp_path, spaces)
    w.write(MultiAgentBatch({"a": a, "b": b}, env_steps=7))
    w.close()
    assert_batches_equal(read_all(tmp_path / "a"), a.decompress_if_needed())
    assert_batches_equal(read_all(tmp_path / "b"), b)
    meta = open_file(list_files(tmp_path / "a")[0]).meta
    assert meta["observation_space"]["shape"] == [6, 5, 3]
    assert meta["columns"]["obs"] == {"dtype": "|u1", "shape": [6, 5, 3]}


def test_each_batch_is_durable_before_write_returns_and_parts_merge_on_roll_over(tmp_path):
    table = batch_to_table(numbered_batch(0, 10), *CARTPOLE_SPACES["default_policy"])
    w = OutputWriter(tmp_path, CARTPOLE_SPACES, max_file_size=3 * table.nbytes)
    w.write(numbered_batch(0, 10))
    w.write(numbered_batch(10, 10))
    parts = sorted(p.name for p in tmp_path.glob("*.parquet"))
    assert len(parts) == 2 and all(".part-" in p for p in parts)
    np.testing.assert_array_equal(read_all(tmp_path)["t"], np.arange(20))  # readable now
    w.write(numbered_batch(20, 10))  # the parts reach the roll-over size: one file
    assert [".part-" in p.name for p in tmp_path.glob("*.parquet")] == [False]
    np.testing.assert_array_equal(read_all(tmp_path)["t"], np.arange(30))


def test_parts_of_a_finished_file_are_ignored_after_a_crash_between_merge_and_delete(
    tmp_path, monkeypatch
):
    w = OutputWriter(tmp_path, CARTPOLE_SPACES, max_file_size=10**9)
    w.write(numbered_batch(0, 10))
    w.write(numbered_batch(10, 10))
    monkeypatch.setattr(type(tmp_path), "unlink", lambda self, missing_ok=False: None)
    w.close()  # merged, but the parts could not be deleted (as if the process died)
    assert len(list(tmp_path.glob("*.parquet"))) == 3
    np.testing.assert_array_equal(read_all(tmp_path)["t"], np.arange(20))


def test_a_crash_mid_write_leaves_earlier_files_valid_and_no_file_under_a_final_name(
    tmp_path, monkeypatch
):
    w = OutputWriter(tmp_path, CARTPOLE_SPACES, max_file_size=1)
    w.write(numbered_batch(0, 10))
    real = pq.write_table

    def dies_halfway(table, where, **kwargs):
        real(table.slice(0, 3), where, **kwargs)
        with open(where, "r+b") as f:
            f.truncate(100)
        raise OSError("disk full")

    monkeypatch.setattr(writer_module.pq, "write_table", dies_halfway)
    with pytest.raises(OSError, match="disk full"):
        w.write(numbered_batch(10, 10))
    assert len(list(tmp_path.iterdir())) == 1  # the temporary file is gone
    np.testing.assert_array_equal(read_all(tmp_path)["t"], np.arange(10))


# -- reading -----------------------------------------------------------------------------
@settings(max_examples=15, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 700), min_size=1, max_size=4),
    batch=st.integers(1, 300),
    window=st.sampled_from([0, 1, 500, 3000]),
)
def test_each_epoch_hands_out_every_row_exactly_once(tmp_path_factory, sizes, batch, window):
    path = tmp_path_factory.mktemp("data")
    total = write_numbered(path, sizes)
    reader = ParquetInput(list_files(path), batch, shuffle_window=window, seed=3)
    epochs = math.lcm(total, batch) // total
    seen = np.concatenate([reader.next()["t"] for _ in range(epochs * total // batch)])
    for e in range(epochs):
        np.testing.assert_array_equal(np.sort(seen[e * total : (e + 1) * total]), np.arange(total))
    if window == 0:
        np.testing.assert_array_equal(seen[:total], np.arange(total))


def test_reader_resumes_exactly_from_its_position(tmp_path):
    write_numbered(tmp_path, [1500, 2600, 900])
    files = list_files(tmp_path)
    reader = ParquetInput(files, 700, shuffle_window=2000, seed=1)
    for _ in range(5):
        reader.next()
    state = reader.get_state()
    expected = [reader.next()["t"] for _ in range(12)]  # crosses windows and an epoch
    resumed = ParquetInput(files, 700, shuffle_window=2000, seed=1)
    resumed.set_state(state)
    for want in expected:
        np.testing.assert_array_equal(resumed.next()["t"], want)
    with pytest.raises(OfflineDataError, match="other input files"):
        ParquetInput(files[:2], 700, seed=1).set_state(state)


def test_evaluators_split_the_files(ray_session, tmp_path):
    write_numbered(tmp_path, [200] * 4)
    config = {
        "env": "CartPole-v1",
        "input": str(tmp_path),
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
        "train_batch_size": 400,
        "input_shuffle_window": 0,
    }
    with BCTrainer(config) as t:
        import ray

        evaluators = t.evaluators.remote_evaluators
        rows = [
            np.concatenate([b["t"] for b in ray.get([e.sample.remote(), e.sample.remote()])])
            for e in evaluators
        ]
    # 200 rows per sample() each; evaluator 1 reads files 0 and 2, evaluator 2 files 1, 3
    assert sorted(rows[0] // 200) == [0] * 200 + [2] * 200
    assert sorted(rows[1] // 200) == [1] * 200 + [3] * 200


def test_ray_dataset_input(ray_session, tmp_path):
    import ray.data

    total = write_numbered(tmp_path, [300, 300])
    dataset = ray.data.from_items(
        [{"obs": np.full(4, i, np.float32), "actions": i % 2, "t": i} for i in range(total)]
    )
    config = {"env": "CartPole-v1", "input": dataset, "train_batch_size": 250}
    with BCTrainer(config) as t:
        seen = np.concatenate([t.local_evaluator.sample()["t"] for _ in range(12)])
        assert t.local_evaluator.sample()[SampleBatch.OBS].shape == (250, 4)
    for e in range(5):  # 3000 rows: five epochs, each row once per epoch
        np.testing.assert_array_equal(np.sort(seen[e * total : (e + 1) * total]), np.arange(total))
    assert t.config.to_dict()["input"] is None  # a dataset is not stored in checkpoints


def test_input_mix_draws_both_sources(tmp_path):
    write_numbered(tmp_path, [500])
    config = {"env": "CartPole-v1", "input_mix": {"sampler": 0.5, str(tmp_path): 0.5}}
    with BCTrainer({**config, "train_batch_size": 100}) as t:
        batches = [t.local_evaluator.sample() for _ in range(40)]
    from_data = sum(SampleBatch.ACTION_LOGP not in b for b in batches)
    assert 8 <= from_data <= 32  # binomial(40, 0.5): outside this range p < 1e-4


def test_trainer_checkpoint_resumes_the_reader_and_the_weights_exactly(tmp_path):
    write_numbered(tmp_path / "data", [3000, 2000])
    config = {"env": "CartPole-v1", "input": str(tmp_path / "data"), "train_batch_size": 800}
    with BCTrainer(config) as t:
        for _ in range(3):
            t.train()
        state = t.get_state()
        expected = [t.train()["learner/policy_loss"] for _ in range(4)]
        weights = t.get_weights()
    with BCTrainer(config) as resumed:
        resumed.set_state(state)
        assert [resumed.train()["learner/policy_loss"] for _ in range(4)] == expected
        for k, v in resumed.get_weights()["default_policy"].items():
            np.testing.assert_array_equal(v, weights["default_policy"][k])


def test_checkpoint_covers_the_remote_evaluators_reading_positions(ray_session, tmp_path):
    write_numbered(tmp_path / "data", [1000] * 4)
    config = {
        "env": "CartPole-v1",
        "input": str(tmp_path / "data"),
        "train_batch_size": 600,
        "num_evaluators": 2,
        "num_cpus_per_evaluator": 0.5,
    }
    with BCTrainer(config) as t:
        for _ in range(3):
            t.train()
        assert sorted(t.get_state()["inputs"]) == ["1", "2"]
        checkpoint = t.save(tmp_path / "checkpoint")
        expected = [t.train()["learner/policy_loss"] for _ in range(4)]
    with BCTrainer(config) as resumed:
        resumed.restore(checkpoint)
        assert [resumed.train()["learner/policy_loss"] for _ in range(4)] == expected


# -- bad input ---------------------------------------------------------------------------
def test_missing_and_empty_inputs_name_the_path(tmp_path):
    with pytest.raises(OfflineDataError, match="does not exist"):
        BCTrainer({"env": "CartPole-v1", "input": str(tmp_path / "nope")})
    with pytest.raises(OfflineDataError, match=r"holds no \.parquet files"):
        BCTrainer({"env": "CartPole-v1", "input": str(tmp_path)})
    with pytest.raises(OfflineDataError, match="matches no files"):
        BCTrainer({"env": "CartPole-v1", "input": str(tmp_path / "*.parquet")})
    with (
        BCTrainer({"env": "CartPole-v1"}) as acting_only,  # e.g. to serve a checkpoint
        pytest.raises(ConfigError, match="learns from logged data"),
    ):
        acting_only.train()
    with pytest.raises(ConfigError, match="'input' = 3 is not valid"):
        BCTrainer({"env": "CartPole-v1", "input": 3})


def test_a_corrupt_file_is_named_and_skipped_on_request(tmp_path):
    write_numbered(tmp_path, [100, 100, 100])
    bad = list_files(tmp_path)[1]
    bad.write_bytes(bad.read_bytes()[:-40])  # truncated: no footer
    with pytest.raises(
        OfflineDataError, match=re.escape(f"'{bad}' is not a readable Parquet file")
    ):
        ParquetInput(list_files(tmp_path), 50)
    reader = ParquetInput(list_files(tmp_path), 50, skip_bad_files=True, shuffle_window=0)
    assert reader.num_rows == 200 and len(reader.skipped) == 1
    seen = np.concatenate([reader.next()["t"] for _ in range(4)])
    np.testing.assert_array_equal(seen, np.r_[0:100, 200:300])


def test_observations_of_another_shape_are_refused_naming_both_shapes(tmp_path):
    write_numbered(tmp_path, [100])
    with pytest.raises(OfflineDataError, match=r"shape \(4,\).*gives rows of shape \(3,\)"):
        BCTrainer({"env": "Pendulum-v1", "input": str(tmp_path)})


# -- off-policy estimation ---------------------------------------------------------------
def bandit_episodes(n: int, p_behaviour: float, horizon: int, rng) -> list[SampleBatch]:
    """Episodes of ``horizon`` steps; action 1 (probability ``p_behaviour``) pays 1."""
    out = []
    for i in range(n):
        actions = (rng.random(horizon) < p_behaviour).astype(np.int64)
        logp = np.where(actions == 1, np.log(p_behaviour), np.log(1 - p_behaviour))
        out.append(
            SampleBatch(
                actions=actions,
                rewards=actions.astype(np.float32),
                action_logp=logp.astype(np.float32),
                eps_id=np.full(horizon, i),
                t=np.arange(horizon),
            )
        )
    return out


@pytest.mark.parametrize("name", ["is", "wis"])
def test_is_and_wis_estimate_the_target_return_within_their_standard_error(name):
    # behaviour: action 1 with p 0.5; target: p 0.7.  True discounted return of the
    # target: sum_t gamma^t 0.7.  IS is unbiased, so |estimate - truth| < 4 standard
    # errors fails with probability < 1e-4; WIS's bias is O(1/n) = O(1e-3) here, far
    # below its standard error (~0.03).
    gamma, horizon, p = 0.9, 5, 0.7
    truth = p * sum(gamma**t for t in range(horizon))
    episodes = bandit_episodes(2000, 0.5, horizon, np.random.default_rng(7))

    def target_logp(ep):
        return np.where(ep["actions"] == 1, np.log(p), np.log(1 - p))

    out = estimate(name, episodes, target_logp, gamma)
    assert abs(out["v_target"] - truth) < 4 * out["v_target_std_err"]
    assert out["v_target_std_err"] < 0.1  # IS ~0.06, WIS ~0.03: the test has power
    assert out["v_behavior"] == pytest.approx(0.5 * truth / p, abs=4 * 0.03)
    same = estimate(name, episodes, lambda ep: ep["action_logp"].astype(np.float64), gamma)
    assert same["v_target"] == pytest.approx(same["v_behavior"])  # ratios of 1


def test_logged_episodes_are_whole_runs(tmp_path):
    config = {"env": "CartPole-v1", "train_batch_size": 400, "output": str(tmp_path)}
    with PGTrainer(config) as t:
        t.local_evaluator.sample()
        returns = sorted(e.episode_reward for e in t.local_evaluator.get_metrics())
    episodes = list(iter_episodes(list_files(tmp_path)))
    assert sorted(float(e["rewards"].sum()) for e in episodes) == returns


def test_files_written_by_hierl_read_back_through_ray_data(ray_session, tmp_path):
    import ray.data

    image = gym.spaces.Box(0, 255, (6, 5, 3), np.uint8)
    rng = np.random.default_rng(1)
    rows = SampleBatch(
        obs=rng.integers(0, 256, (40, 6, 5, 3), dtype=np.uint8),
        actions=rng.integers(0, 3, 40),
        action_dist_inputs=rng.normal(size=(40, 3)).astype(np.float32),
        t=np.arange(40),
    )
    w = OutputWriter(tmp_path, {"default_policy": (image, gym.spaces.Discrete(3))})
    w.write(rows)
    w.close()
    dataset = ray.data.read_parquet([str(f) for f in list_files(tmp_path)])
    reader = RayDataInput(dataset, 40, shuffle_window=0)
    assert_batches_equal(SampleBatch({k: v for k, v in reader.next().items()}), rows)


def test_version_1_files_with_fixed_size_lists_are_still_read(tmp_path):
    import json

    import pyarrow as pa

    from hierl.evaluators.offline.schema import METADATA_KEY

    obs = np.arange(24, dtype=np.float32).reshape(3, 2, 4)
    meta = {
        "version": 1,
        "columns": {"obs": {"dtype": "<f4", "shape": [2, 4]}, "t": {"dtype": "<i8", "shape": []}},
        "observation_space": {"type": "Box", "shape": [2, 4], "dtype": "float32"},
        "action_space": {"type": "Discrete", "n": 2, "start": 0},
        "policy_id": "default_policy",
    }
    table = pa.Table.from_arrays(
        [pa.FixedSizeListArray.from_arrays(pa.array(obs.reshape(-1)), 8), pa.array([0, 1, 2])],
        names=["obs", "t"],
        metadata={METADATA_KEY: json.dumps(meta).encode()},
    )
    pq.write_table(table, tmp_path / "old.parquet")
    back = read_file(open_file(tmp_path / "old.parquet"))
    np.testing.assert_array_equal(back["obs"], obs)
    assert back["obs"].dtype == np.float32


def test_td3_trains_from_logged_data_alone(tmp_path):
    from hierl.algorithms.ddpg import TD3Trainer

    logged = {"env": "Pendulum-v1", "output": str(tmp_path), "output_postprocessed": False}
    with TD3Trainer({**logged, "timesteps_per_iteration": 1500}) as online:
        online.train()  # random exploration until learning_starts: 1.5k rows logged
    config = {
        "env": "Pendulum-v1",
        "input": str(tmp_path),
        "postprocess_inputs": True,
        "learning_starts": 1000,
        "timesteps_per_iteration": 500,
    }
    with TD3Trainer(config) as offline:
        before = offline.get_weights()
        results = [offline.train() for _ in range(3)]
        after = offline.get_weights()
    assert results[-1]["timesteps_total"] == 1500  # rows read, from the data alone
    last = {k: v for k, v in results[-1].items() if k.startswith("learner/")}
    assert {"learner/critic_loss", "learner/actor_loss"} <= set(last)
    assert all(np.isfinite(list(last.values()))), last
    assert results[-1]["learner/critic_loss"] < results[1]["learner/critic_loss"]
    policy_before, policy_after = before["default_policy"], after["default_policy"]
    changed = [k for k in policy_before if not np.array_equal(policy_before[k], policy_after[k])]
    assert changed


def test_a_bc_checkpoint_acts_without_its_data(tmp_path):
    import shutil

    from hierl.algorithms.trainer import Trainer
    from hierl.algorithms.trainer_config import ACTING_OVERRIDES

    write_numbered(tmp_path / "data", [600])
    config = {"env": "CartPole-v1", "input": str(tmp_path / "data"), "train_batch_size": 200}
    with BCTrainer(config) as trainer:
        trainer.train()
        path = trainer.save(tmp_path / "ckpt")
        expected = trainer.compute_single_action(np.zeros(4, np.float32))
    shutil.rmtree(tmp_path / "data")  # e.g. served on another machine
    with Trainer.from_checkpoint(path, **ACTING_OVERRIDES) as acting:
        assert acting.compute_single_action(np.zeros(4, np.float32)) == expected


def test_input_spec_from_config_parses_input_beside_the_offline_settings(tmp_path):
    from hierl.algorithms.trainer_config import TrainerConfig
    from hierl.evaluators.offline.settings import InputSpec

    files = [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
    config = TrainerConfig.from_dict({"input_mix": {"sampler": 0.25}})
    assert InputSpec.from_config(config) is None  # the sampler alone
    config = TrainerConfig.from_dict({"input": files, "input_shuffle_window": 7})
    spec = InputSpec.from_config(config)
    assert spec == config.input_spec()
    assert spec.sources == {f"files:{files[0]}+2": 1.0} and spec.logged_files() == tuple(files)
    assert spec.shuffle_window == 7 and spec.external is None
    mixed = TrainerConfig.from_dict({"input_mix": {"sampler": 0.25, str(tmp_path): 0.75}})
    assert InputSpec.from_config(mixed).sources == {"sampler": 0.25, str(tmp_path): 0.75}
    with pytest.raises(ConfigError, match=r"'input' = 3 is not valid; valid: 'sampler'"):
        TrainerConfig.from_dict({"input": 3})
    with pytest.raises(ConfigError, match="source 'sampler' the probability -1"):
        TrainerConfig.from_dict({"input_mix": {"sampler": -1}})
