"""PolicyEvaluator: batch sizes, episode accounting, autoreset modes, seeding, remote use."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from hierl.algorithms.pg import PGConfig, PGPolicy, PGTrainer
from hierl.evaluators import EpisodeCallbacks, EvaluatorSet, EvaluatorSpec, PolicyEvaluator
from hierl.evaluators.filters import MeanStdFilter, NoFilter, RunningStat
from hierl.sample_batch import SampleBatch as SB

pytestmark = pytest.mark.timeout(120)


def make_evaluator(env, env_config=None, **kwargs) -> PolicyEvaluator:
    config = PGConfig.from_dict({"env": env, "model": {"hiddens": (8, 8)}})
    kwargs.setdefault("num_envs_per_evaluator", 2)
    kwargs.setdefault("rollout_fragment_length", 3)
    kwargs.setdefault("seed", 0)
    worker_index = kwargs.pop("worker_index", 0)
    spec = EvaluatorSpec.of(env, PGPolicy, config, env_config=env_config or {}, **kwargs)
    return PolicyEvaluator(spec, worker_index=worker_index)


def test_batch_size_and_episode_accounting_across_fragments(counting_env):
    ev = make_evaluator(counting_env, {"length": 5})
    b1, b2 = ev.sample(), ev.sample()
    assert b1.count == b2.count == 6  # 3 steps x 2 envs
    both = SB.concat_samples([b1, b2])
    # one env's rows are contiguous; per env: t = 0,1,2 then 3,4,0 (new episode)
    for env_rows in (slice(0, 3), slice(3, 6)):
        assert list(b1[SB.T][env_rows]) == [0, 1, 2]
    assert list(b2[SB.T][0:3]) == [3, 4, 0]
    # the episode continues across the fragment boundary with the same id
    assert b1[SB.EPS_ID][2] == b2[SB.EPS_ID][0] != b2[SB.EPS_ID][2]
    episodes = ev.get_metrics()
    assert [(e.episode_reward, e.episode_length) for e in episodes] == [(5.0, 5), (5.0, 5)]
    assert ev.get_metrics() == []
    assert both[SB.TERMINATEDS].sum() == 2 and not both[SB.TRUNCATEDS].any()


def test_truncation_keeps_final_observation(counting_env):
    ev = make_evaluator(counting_env, {"length": 2, "terminate": False}, num_envs_per_evaluator=1)
    b = ev.sample()  # rows: t=0, t=1 (truncated), t=0 of the next episode
    assert list(b[SB.TRUNCATEDS]) == [False, True, False]
    assert not b[SB.TERMINATEDS].any()
    # new_obs of the truncated row is the final observation, not the reset one
    assert b[SB.NEW_OBS][1][0] == 2.0
    assert b[SB.OBS][2][0] == 0.0
    assert b[SB.NEW_OBS][1][1] == b[SB.OBS][1][1] != b[SB.OBS][2][1]


def test_next_step_autoreset_vector_env_drops_reset_rows(counting_env):
    def creator(cfg):
        fns = [lambda: counting_env({"length": 2})] * 3
        return SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)

    ev = make_evaluator(creator, rollout_fragment_length=6)
    b = ev.sample()
    # per env: steps t0,t1(done), reset-row (dropped), t0,t1(done), reset-row: 4 of 6 kept
    assert b.count == 3 * 4
    assert list(b[SB.T][:4]) == [0, 1, 0, 1]
    assert b[SB.TERMINATEDS].sum() == 6
    # no row acts on a final observation
    assert (b[SB.OBS][:, 0] < 2).all()
    np.testing.assert_array_equal(b[SB.NEW_OBS][b[SB.TERMINATEDS]][:, 0], 2.0)
    assert len(ev.get_metrics()) == 6


def test_complete_episodes_mode_returns_whole_episodes(counting_env):
    ev = make_evaluator(counting_env, {"length": 4}, batch_mode="complete_episodes")
    b = ev.sample()
    assert b.count >= 6
    segments = b.split_by_episode()
    assert all(s.count == 4 and s[SB.TERMINATEDS][-1] for s in segments)
    assert all(list(s[SB.T]) == [0, 1, 2, 3] for s in segments)


def test_postprocessing_adds_advantages_per_segment(counting_env):
    ev = make_evaluator(counting_env, {"length": 5})
    b = ev.sample()
    assert SB.ADVANTAGES in b and SB.VALUE_TARGETS in b
    assert b[SB.ADVANTAGES].shape == (6,)


def test_seeded_runs_are_reproducible(counting_env):
    a = make_evaluator("CartPole-v1", seed=3, rollout_fragment_length=20).sample()
    b = make_evaluator("CartPole-v1", seed=3, rollout_fragment_length=20).sample()
    c = make_evaluator("CartPole-v1", seed=4, rollout_fragment_length=20).sample()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k]) if k != SB.EPS_ID else None
    assert not np.array_equal(a[SB.OBS], c[SB.OBS])


def test_compression_is_lossless(counting_env):
    plain = make_evaluator("CartPole-v1", rollout_fragment_length=10).sample()
    packed = make_evaluator("CartPole-v1", rollout_fragment_length=10, compress_observations=True)
    batch = packed.sample()
    assert batch.is_compressed()
    np.testing.assert_array_equal(batch.decompress_if_needed()[SB.OBS], plain[SB.OBS])


def test_pendulum_continuous_actions_are_clipped_to_bounds():
    ev = make_evaluator("Pendulum-v1", rollout_fragment_length=5)
    b = ev.sample()
    assert b[SB.ACTIONS].shape == (10, 1)
    assert b[SB.ACTION_LOGP].shape == (10,)


def test_env_error_names_env_and_worker():
    class Broken(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):
            raise RuntimeError("boom")

    ev = make_evaluator(lambda cfg: Broken(), worker_index=3, num_envs_per_evaluator=1)
    with pytest.raises(
        RuntimeError, match=r"raised in step\(\) on evaluator 3: RuntimeError: boom"
    ):
        ev.sample()


def test_running_stat_merge_matches_direct():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(100, 3))
    a, b, whole = RunningStat((3,)), RunningStat((3,)), RunningStat((3,))
    a.push_batch(x[:37])
    b.push_batch(x[37:])
    a.merge(b)
    whole.push_batch(x)
    np.testing.assert_allclose(a.mean, x.mean(0))
    np.testing.assert_allclose(a.std, x.std(0))
    np.testing.assert_allclose(whole.std, x.std(0))


def test_running_stat_single_rows_match_one_batch():
    """Row by row (one env's steps, the fast path) gives the batch formula's statistics."""
    x = np.random.default_rng(4).normal(2.0, 3.0, size=(50, 4))
    rows, whole = RunningStat((4,)), RunningStat((4,))
    for row in x:
        rows.push_batch(row[None])
    whole.push_batch(x)
    assert rows.n == whole.n == 50
    np.testing.assert_allclose(rows.mean, x.mean(0), rtol=1e-12)
    np.testing.assert_allclose(rows.m2, whole.m2, rtol=1e-10)
    filtered = MeanStdFilter((4,))
    out = np.concatenate([filtered(row[None]) for row in x])
    assert out.dtype == np.float32 and filtered.buffer.n == 50
    np.testing.assert_allclose(out[-1], np.clip((x[-1] - x.mean(0)) / x.std(0), -10, 10), rtol=1e-5)


def test_mean_std_filter_buffer_flush_and_apply():
    local, remote = MeanStdFilter((2,)), MeanStdFilter((2,))
    data = np.arange(20, dtype=np.float64).reshape(10, 2)
    remote(data)
    local.apply_buffer(remote.flush_buffer())
    np.testing.assert_allclose(local.rs.mean, data.mean(0))
    assert remote.flush_buffer()["n"] == 0
    out = local(np.array([[9.0, 10.0]]), update=False)
    np.testing.assert_allclose(out, [[0.0, 0.0]], atol=1e-6)


def test_frozen_filter_normalises_bit_for_bit_without_recording():
    f = MeanStdFilter((3,), clip=2.0)
    rng = np.random.default_rng(0)
    f(rng.normal(3.0, 0.5, size=(40, 3)))
    normalize = f.frozen()
    rows = rng.normal(3.0, 2.0, size=(20, 1, 3)).astype(np.float32)  # some beyond the clip
    n_before = f.rs.n
    for row in rows:
        out = normalize(row)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, f(row, update=False))  # the same arithmetic
    assert f.rs.n == n_before  # nothing recorded
    assert np.abs(normalize(np.full((1, 3), 1e6, np.float32))).max() == 2.0

    class Doubling(MeanStdFilter):  # a subclass's own __call__ is what frozen() calls
        def __call__(self, x, update=True):
            return 2 * super().__call__(x, update)

    d = Doubling((3,))
    np.testing.assert_array_equal(d.frozen()(np.ones((1, 3))), [[2.0, 2.0, 2.0]])


def test_record_feeds_the_statistics_as_a_call_does():
    rng = np.random.default_rng(5)
    rows = rng.normal(2.0, 3.0, size=(30, 3)).astype(np.float32)
    rows[4, 1] = np.nan  # left out, counted
    called, recorded = MeanStdFilter((3,)), MeanStdFilter((3,))
    called(rows[:10])
    recorded.record(rows[:10])
    called(rows[10:])
    assert recorded.record(rows[10:]) is None  # nothing normalised
    recorded.record(rows[:0])
    for attr in ("rs", "buffer"):
        a, b = getattr(called, attr), getattr(recorded, attr)
        assert a.n == b.n == 29
        assert a.mean.tobytes() == b.mean.tobytes() and a.m2.tobytes() == b.m2.tobytes()
    assert called.num_nonfinite_rows_skipped == recorded.num_nonfinite_rows_skipped == 1
    NoFilter((3,)).record(rows)  # the identity has nothing to record (ES calls it too)


@pytest.mark.timeout(300)
def test_remote_evaluators_sample_sync_weights_and_filters(ray_session, counting_env):
    config = PGConfig.from_dict({"env": "CartPole-v1", "model": {"hiddens": (8, 8)}})
    spec = EvaluatorSpec.of(
        "CartPole-v1",
        PGPolicy,
        config,
        num_envs_per_evaluator=2,
        rollout_fragment_length=5,
        seed=0,
        observation_filter="MeanStdFilter",
    )
    evs = EvaluatorSet(spec, num_evaluators=2, num_cpus_per_evaluator=0.5, get_timeout_s=240)
    try:
        local_w = evs.local_evaluator.get_weights()["default_policy"]
        for w in evs.get([e.get_weights.remote() for e in evs.remote_evaluators]):
            for k in local_w:
                np.testing.assert_array_equal(w["default_policy"][k], local_w[k])
        batches = evs.get([e.sample.remote() for e in evs.remote_evaluators])
        assert [b.count for b in batches] == [10, 10]
        # different worker indices → different env seeds → different data
        assert not np.array_equal(batches[0][SB.OBS], batches[1][SB.OBS])
        # a remote evaluator samples exactly what a local one with its index would
        twin = PolicyEvaluator(spec, worker_index=1)
        twin.set_weights(evs.local_evaluator.get_weights())
        np.testing.assert_array_equal(twin.sample()[SB.OBS], batches[0][SB.OBS])
        evs.sync_filters()
        assert evs.local_evaluator.filters["default_policy"].rs.n == 2 * 10 + 2 * 2
        states = evs.get([e.get_filters.remote(flush_after=False) for e in evs.remote_evaluators])
        for s in states:
            assert s["default_policy"]["rs"]["n"] == 24
        hosts = evs.get([e.get_host.remote() for e in evs.remote_evaluators])
        assert len(set(hosts)) == 2
    finally:
        evs.stop()


@pytest.mark.timeout(300)
def test_a_remote_evaluator_samples_a_fake_env_of_tests_support(ray_session, counting_env):
    # CountingEnv lives in tests/support/, which Ray workers cannot import: the ray_session
    # fixture ships the modules under tests/ by value
    config = PGConfig.from_dict({"env": counting_env, "model": {"hiddens": (8, 8)}})
    spec = EvaluatorSpec.of(
        counting_env,
        PGPolicy,
        config,
        env_config={"length": 4},
        num_envs_per_evaluator=1,
        rollout_fragment_length=8,
        seed=0,
    )
    evs = EvaluatorSet(spec, num_evaluators=1, num_cpus_per_evaluator=0.5, get_timeout_s=240)
    try:
        (batch,) = evs.get([e.sample.remote() for e in evs.remote_evaluators])
    finally:
        evs.stop()
    assert batch[SB.OBS][:, 0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]


class LastObsCallbacks(EpisodeCallbacks):
    def on_episode_end(self, *, episode, env_info, worker_index):
        episode.custom_metrics["double_len"] = 2 * episode.episode_length
        episode.custom_metrics["worker"] = worker_index


def test_custom_episode_metrics_reach_results(counting_env):
    from hierl.algorithms.pg import PGTrainer

    config = {"env": counting_env, "env_config": {"length": 3}, "callbacks": LastObsCallbacks}
    with PGTrainer({**config, "train_batch_size": 24, "num_envs_per_evaluator": 2}) as t:
        result = t.train()
    assert result["custom_metrics/double_len_mean"] == 6.0
    assert result["custom_metrics/worker_max"] == 0.0
    assert result["episodes_this_iter"] == 8


@pytest.mark.parametrize("terminate", [True, False])
def test_ppo_bootstraps_truncation_and_cuts_but_not_termination(counting_env, terminate):
    from hierl.algorithms.ppo import PPOConfig, PPOPolicy

    config = PPOConfig.from_dict(
        {"env": counting_env, "gamma": 0.5, "lambda_": 1.0, "model": {"hiddens": [8]}}
    )
    ev = PolicyEvaluator(
        EvaluatorSpec.of(
            counting_env,
            PPOPolicy,
            config,
            env_config={"length": 2, "terminate": terminate},
            num_envs_per_evaluator=1,
            rollout_fragment_length=3,
            seed=0,
        )
    )
    b = ev.sample()  # rows: t=0, t=1 (episode ends), t=0 (fragment cut)
    v_next = ev.policy.value(b[SB.NEW_OBS])
    targets = b[SB.VALUE_TARGETS]
    end_bootstrap = 0.0 if terminate else 0.5 * v_next[1]
    assert targets[1] == pytest.approx(1 + end_bootstrap, abs=1e-5)
    assert targets[0] == pytest.approx(1 + 0.5 * targets[1], abs=1e-5)
    assert targets[2] == pytest.approx(1 + 0.5 * v_next[2], abs=1e-5)


# -- observation filter statistics: every observation acted on, once, in every mode -----
class _RecordingEnv(gym.Env):
    """CountingEnv-like fake that logs every observation it emits with a final flag."""

    def __init__(self, length: int, log: list):
        self.length, self.log, self.t = length, log, 0
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self, final: bool) -> np.ndarray:
        obs = np.array([self.t, 10.0 * self.length + self.t**2], np.float32)
        self.log.append((obs.copy(), final))
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(False), {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        return self._obs(done), 1.0, done, False, {}


@pytest.mark.parametrize(
    "mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
)
def test_mean_std_filter_counts_each_observation_acted_on_once(mode):
    log: list = []

    def creator(cfg):
        fns = [lambda n=n: _RecordingEnv(n, log) for n in (3, 5)]
        return SyncVectorEnv(fns, autoreset_mode=mode)

    ev = make_evaluator(creator, rollout_fragment_length=40, observation_filter="MeanStdFilter")
    batch = ev.sample()
    rs = ev.filters["default_policy"].rs
    real = np.stack([obs for obs, final in log if not final]).astype(np.float64)
    finals = sum(final for _, final in log)
    assert finals >= 15  # short episodes: many resets in 40 steps
    # exactly the emitted non-final observations: none twice, no final one
    assert rs.n == len(real)
    np.testing.assert_allclose(rs.mean, real.mean(0), rtol=1e-10)
    np.testing.assert_allclose(rs.std, real.std(0), rtol=1e-8)
    # equivalently: every row's OBS, plus each sub-env's next observation to act on
    pending = len(real) - batch.count
    assert pending == 2 - (mode == AutoresetMode.NEXT_STEP) * int(ev.sampler.pending_reset.sum())


def test_mean_std_filter_update_mask_records_only_those_rows():
    f = MeanStdFilter((2,))
    data = np.arange(12, dtype=np.float64).reshape(6, 2)
    mask = np.array([True, False, True, True, False, False])
    f(data, update=mask)
    assert f.rs.n == f.buffer.n == 3
    np.testing.assert_allclose(f.rs.mean, data[mask].mean(0))
    f(data, update=np.zeros(6, dtype=bool))
    f(data, update=np.bool_(False))
    assert f.rs.n == 3
    with pytest.raises(ValueError, match=r"update mask of shape \(2,\) for 6 rows"):
        f(data, update=np.array([True, False]))


# -- sampling settings declared once (issue 39) ------------------------------------------
HIERL = Path(__file__).resolve().parent.parent / "hierl"


def test_sampling_settings_are_declared_in_one_dataclass():
    """No class outside SamplingSettings (and the configs that include it, which may
    change a default) declares one of its fields; EvaluatorSpec carries the object."""
    import ast
    import dataclasses
    import importlib

    from hierl.evaluators.settings import SamplingSettings

    names = {f.name for f in dataclasses.fields(SamplingSettings)}
    declaring = []
    for path in sorted(HIERL.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(s, ast.AnnAssign)
                and isinstance(s.target, ast.Name)
                and s.target.id in names
                for s in node.body
            ):
                module = ".".join(path.relative_to(HIERL.parent).with_suffix("").parts)
                declaring.append(getattr(importlib.import_module(module), node.name))
    assert SamplingSettings in declaring
    others = sorted(c.__name__ for c in declaring if not issubclass(c, SamplingSettings))
    # Not copies of a trainer's sampling settings: AlphaZero's own self-play fragment
    # (a nested algorithm, no evaluators), the values one rollout loop is built with
    # (PolicyEvaluator.sampler_settings, from spec.sampling) and Tune's logger callbacks.
    assert others == ["AlphaZeroConfig", "ExperimentSpec", "RolloutSettings"]
    spec_fields = {f.name for f in dataclasses.fields(EvaluatorSpec)}
    assert not names & spec_fields and "sampling" in spec_fields


def test_trainer_config_includes_the_sampling_settings_as_documented_flat_keys():
    import dataclasses

    from hierl.algorithms.ppo import PPOConfig
    from hierl.algorithms.trainer_config import TrainerConfig
    from hierl.config import ConfigError, field_docs
    from hierl.evaluators.settings import SamplingSettings

    assert issubclass(TrainerConfig, SamplingSettings)
    config = PPOConfig.from_dict({"rollout_fragment_length": 200, "compress_observations": True})
    settings = config.sampling_settings()
    assert type(settings) is SamplingSettings
    assert (settings.rollout_fragment_length, settings.compress_observations) == (200, True)
    docs = field_docs(PPOConfig)
    assert all(docs.get(f.name) for f in dataclasses.fields(SamplingSettings))
    with pytest.raises(ConfigError, match="did you mean 'rollout_fragment_length'"):
        PPOConfig.from_dict({"rollout_fragmnt_length": 200})
    with pytest.raises(ConfigError, match="'num_envs_per_evaluator' = 0 is invalid"):
        PPOConfig.from_dict({"num_envs_per_evaluator": 0})


def test_for_acting_keeps_the_policy_settings_and_drops_the_training_ones():
    from hierl.evaluators.offline.settings import InputSpec, OutputSpec

    spec = EvaluatorSpec.of(
        "CartPole-v1",
        PGPolicy,
        None,
        num_envs_per_evaluator=4,
        rollout_fragment_length=7,
        batch_mode="complete_episodes",
        clip_rewards=1.0,
        compress_observations=True,
        sample_async=True,
        observation_filter="MeanStdFilter",
        preprocessor_pref="none",
        input=InputSpec({"/data": 1.0}),
        output=OutputSpec("/out"),
        seed=3,
    )
    acting = spec.for_acting(explore=False, seed=9, num_envs=1)
    s = acting.sampling
    assert (s.clip_rewards, s.batch_mode, s.compress_observations, s.sample_async) == (
        None,
        "truncate_episodes",
        False,
        False,
    )
    assert (s.num_envs_per_evaluator, s.rollout_fragment_length) == (1, 7)
    assert (s.observation_filter, s.preprocessor_pref) == ("MeanStdFilter", "none")
    assert (acting.explore, acting.seed, acting.input, acting.output) == (False, 9, None, None)
    assert spec.sampling.compress_observations  # the training spec is unchanged


def test_observations_are_compressed_in_one_place_for_every_input(tmp_path):
    """``compress_observations`` is applied by ``PolicyEvaluator.sample`` alone: the
    simulator's and logged data's batches both come out compressed."""
    from hierl.algorithms.marwil import BCTrainer

    sources = HIERL / "evaluators"
    applying = [
        p.relative_to(HIERL).as_posix()
        for p in sorted(sources.rglob("*.py"))
        if "compress_observations:" in p.read_text() and "compress(" in p.read_text()
    ]
    assert applying == ["evaluators/policy_evaluator.py"]
    with PGTrainer({"env": "CartPole-v1", "train_batch_size": 40, "output": str(tmp_path)}) as t:
        t.local_evaluator.sample()
    config = {"env": "CartPole-v1", "input": str(tmp_path), "compress_observations": True}
    with BCTrainer({**config, "train_batch_size": 20}) as t:
        batch = t.local_evaluator.sample()
    assert batch.is_compressed()
