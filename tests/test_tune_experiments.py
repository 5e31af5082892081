"""Experiment files: validation before any trial runs, search spaces, ``hierl tune`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hierl.cli import main
from hierl.config import ConfigError

ray_tune = pytest.importorskip("ray.tune")

from hierl.tune.experiments import (  # noqa: E402
    ExperimentSpec,
    load_experiments,
    make_scheduler,
    search_space,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tune"
TUNED = EXAMPLES.parent / "tuned"
pytestmark = pytest.mark.timeout(180)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_files_are_valid(path):
    experiments = load_experiments(path)
    assert experiments and all(spec.run for spec in experiments.values())


@pytest.mark.parametrize("path", sorted(TUNED.glob("*.yaml")), ids=lambda p: p.name)
def test_tuned_examples_build_their_configs(path):
    # what benchmarks/learning.py runs: one experiment, a step budget, a valid config
    # (AlphaZero's: a wall-clock budget; benchmarks/connect_four.py scores its checkpoints)
    from hierl.algorithms.registry import get_trainer_class

    ((name, spec),) = load_experiments(path).items()
    config = get_trainer_class(spec.run).config_class.from_dict({**spec.config, "env": spec.env})
    if spec.run == "ALPHAZERO":
        assert name == path.stem and spec.stop["time_total_s"] > 0 and spec.checkpoint_freq
        return
    assert name == path.stem and spec.stop["timesteps_total"] > 0
    # a population (PPO-ES) reports its best member's evaluation: the members evaluate
    members = getattr(config, "member_config", None)
    interval = config.evaluation_interval if members is None else members["evaluation_interval"]
    assert interval > 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "run: PPO\n  stp: {training_iteration: 1}",
            r"key 'stp'.*did you mean 'stop'",
        ),
        ("run: PPOO", r"unknown algorithm 'PPOO' \(did you mean 'PPO'\?\)"),
        ("run: PPO\n  config: {lrr: {grid_search: [0.1, 0.2]}}", r"'lrr'.*did you mean 'lr'"),
        ("run: PPO\n  scheduler: {type: ashaa}", r"unknown scheduler type 'ashaa'.*'asha'"),
        ("run: PPO\n  scheduler: {type: asha, grace: 2}", r"scheduler 'asha'.*grace"),
        ("run: PPO\n  num_samples: 0", r"num_samples.*>= 1"),
    ],
)
def test_bad_experiments_fail_before_any_trial_naming_the_problem(tmp_path, body, message):
    path = _write(tmp_path, f"exp1:\n  env: CartPole-v1\n  {body}\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_experiments(path)
    assert "experiment 'exp1'" in str(info.value)


def test_exponent_floats_are_numbers_in_experiment_files(tmp_path):
    path = _write(
        tmp_path,
        "exp1:\n  run: PG\n  env: CartPole-v1\n  seed: 3\n"
        "  config:\n    lr: 1e-3\n    gamma: .99\n"
        "    grad_clip: {loguniform: [1e-4, 5E+2]}\n",
    )
    (spec,) = load_experiments(path).values()
    assert spec.config["lr"] == 1e-3 and spec.config["gamma"] == 0.99
    assert spec.seed == 3
    space = spec.param_space()["grad_clip"]
    assert isinstance(space, ray_tune.search.sample.Float)
    assert (space.lower, space.upper) == (1e-4, 500.0)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{loguniform: 1e-4}", "loguniform takes a list, got float"),
        ("{loguniform: [1e-4]}", r"exactly \[low, high\], got 1 value"),
        ("{loguniform: [1e-4, 1e-3, 1e-2]}", r"exactly \[low, high\], got 3 value"),
        ("{loguniform: {low: 1e-4, high: 5e-3}}", "loguniform takes a list, got dict"),
        ("{loguniform: [0, 1e-3]}", "0 < low"),
        ("{uniform: [0.3, 0.1]}", "low must be < high"),
        ("{uniform: [a, b]}", "bounds must be numbers"),
        ("{randint: [1.5, 4]}", "bounds must be integers"),
        ("{grid_search: []}", "at least one value"),
        ("{choice: 3}", "choice takes a list, got int"),
    ],
)
def test_malformed_search_spaces_are_config_errors_naming_key_spec_and_forms(
    tmp_path, spec, message
):
    path = _write(tmp_path, f"exp1:\n  run: PG\n  env: CartPole-v1\n  config:\n    lr: {spec}\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_experiments(path)
    text = str(info.value)
    assert "experiment 'exp1'" in text and "'config.lr'" in text
    assert "valid forms: {grid_search: [v1, v2, ...]}" in text and "{randint: [low, high]}" in text


def test_malformed_nested_and_pbt_search_spaces_name_their_key():
    with pytest.raises(ConfigError, match=r"'config\.model\.hiddens'.*got 0 value"):
        search_space({"model": {"hiddens": {"uniform": []}}})
    spec = ExperimentSpec.from_dict(
        {
            "run": "PG",
            "scheduler": {"type": "pbt", "hyperparam_mutations": {"lr": {"uniform": [1, 0]}}},
        }
    )
    with pytest.raises(ConfigError, match=r"'scheduler\.hyperparam_mutations\.lr'.*low must be"):
        make_scheduler(spec)


def test_search_spaces_become_tune_objects():
    space = search_space(
        {
            "lr": {"grid_search": [1, 2]},
            "clip_param": {"uniform": [0.1, 0.3]},
            "model": {"hiddens": {"choice": [[8], [16]]}},
            "gamma": 0.9,
        }
    )
    assert space["lr"] == {"grid_search": [1, 2]}  # Tune's own grid_search marker
    assert isinstance(space["clip_param"], ray_tune.search.sample.Float)
    assert isinstance(space["model"]["hiddens"], ray_tune.search.sample.Categorical)
    assert space["gamma"] == 0.9


def test_pbt_scheduler_gets_its_mutations_as_search_spaces(tmp_path):
    path = EXAMPLES / "pbt_ppo_cartpole.yaml"
    (spec,) = load_experiments(path).values()
    scheduler = make_scheduler(spec)
    assert isinstance(scheduler, ray_tune.schedulers.PopulationBasedTraining)


@pytest.mark.ray
def test_hierl_tune_runs_an_example_file_end_to_end(ray_session, tmp_path, capsys):
    path = EXAMPLES / "ppo_cartpole_grid.yaml"
    argv = ["tune", str(path), "--stop", "training_iteration=1", "--storage-path", str(tmp_path)]
    assert main([*argv, "--verbose", "0"]) == 0
    out = capsys.readouterr().out
    assert "best trials" in out and "ppo-cartpole-grid" in out
    assert "clip_param=" in out and "lr=" in out
    # 4 grid points, each with its own result directory under the storage path
    trials = [p for p in (tmp_path / "ppo-cartpole-grid").iterdir() if p.is_dir()]
    assert len(trials) == 4
    # each trial ran with its own seed (the experiment's base seed 0 + trial index)
    seeds = [json.loads((p / "result.json").read_text().splitlines()[0]) for p in trials]
    assert sorted(r["config"]["seed"] for r in seeds) == [0, 1, 2, 3]


@pytest.mark.ray
def test_a_trial_with_an_evaluation_metric_has_it_in_every_result(ray_session, tmp_path):
    # Tune wants the metric in every result: always_attach_evaluation_results carries the
    # evaluation of iteration 2 into iteration 3 (NaN at 1)
    from hierl.tune.experiments import run_experiment

    path = _write(
        tmp_path,
        "exp1:\n  run: PG\n  env: CartPole-v1\n  stop: {training_iteration: 3}\n"
        "  metric: evaluation/episode_reward_mean\n"
        "  config: {train_batch_size: 200, num_evaluators: 0, evaluation_interval: 2,\n"
        "           evaluation_num_episodes: 2, always_attach_evaluation_results: true}\n",
    )
    ((name, spec),) = load_experiments(path).items()
    (result,) = run_experiment(name, spec, tmp_path / "tune", verbose=0)
    assert result.error is None
    rows = [json.loads(line) for line in (Path(result.path) / "result.json").open()]
    evals = [r["evaluation/episode_reward_mean"] for r in rows]
    assert len(evals) == 3 and evals[0] != evals[0] and evals[1] == evals[2] > 0


@pytest.mark.parametrize(
    ("callbacks", "message"),
    [
        ("[wandbb]", r"unknown callback 'wandbb' \(did you mean 'wandb'\?\); valid: wandb, mlflow"),
        ("[{mlflow: 3}]", "callback 'mlflow': settings must be a mapping"),
        ("[{mlflow: {tracking_urii: x}}]", "callback 'mlflow':.*tracking_urii"),
        ("[[1, 2]]", "callbacks entry .* is invalid: give a name or"),
    ],
)
def test_bad_logger_callbacks_fail_before_any_trial(tmp_path, callbacks, message):
    pytest.importorskip("mlflow")
    path = _write(tmp_path, f"exp1:\n  run: PG\n  env: CartPole-v1\n  callbacks: {callbacks}\n")
    with pytest.raises(ConfigError, match=message):
        load_experiments(path)


def test_a_logger_callback_without_its_package_names_the_extra(tmp_path, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "wandb" else find_spec(name, *a),
    )
    path = _write(tmp_path, "exp1:\n  run: PG\n  env: CartPole-v1\n  callbacks: [wandb]\n")
    with pytest.raises(
        ConfigError,
        match=r"callback 'wandb' needs the 'wandb' package: pip install 'hierl\[wandb\]'",
    ):
        load_experiments(path)


@pytest.mark.ray
def test_mlflow_callback_logs_every_iteration_of_a_trial(ray_session, tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from hierl.tune.experiments import run_experiment

    # MLflow 3 keeps the file store only behind this switch (a database needs SQLAlchemy)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    path = _write(
        tmp_path,
        "exp1:\n  run: PG\n  env: CartPole-v1\n  stop: {training_iteration: 3}\n"
        f"  callbacks: [{{mlflow: {{tracking_uri: '{uri}', experiment_name: hierl-test}}}}]\n"
        "  config: {train_batch_size: 200, num_evaluators: 0}\n",
    )
    ((name, spec),) = load_experiments(path).items()
    (result,) = run_experiment(name, spec, tmp_path / "tune", verbose=0)
    assert result.error is None
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("hierl-test")
    (run,) = client.search_runs([experiment.experiment_id])
    history = client.get_metric_history(run.info.run_id, "episode_reward_mean")
    assert sorted(m.step for m in history) == [200, 400, 600]  # at timesteps_total
    assert mlflow is not None


TWO_EXPERIMENTS = """\
a:
  run: PG
  env: CartPole-v1
  num_samples: 2
  seed: 5
  stop: {training_iteration: 1}
  config: &space
    train_batch_size: 100
    num_envs_per_evaluator: 1
    lr: {loguniform: [0.0001, 0.01]}
b:
  run: PG
  env: CartPole-v1
  num_samples: 2
  seed: 5
  stop: {training_iteration: 1}
  config: *space
"""


def _trial_rows(exp_dir: Path) -> dict[str, list[dict]]:
    """Each trial's result rows, by trial id."""
    rows = {}
    for trial in exp_dir.iterdir():
        if trial.is_dir():
            lines = (trial / "result.json").read_text().splitlines()
            results = [json.loads(line) for line in lines]
            rows[results[0]["trial_id"]] = results
    return rows


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_tune_file_resume_keeps_finished_experiments_and_runs_the_rest(ray_session, tmp_path):
    # one file, two experiments over the same space and seed (a PBT population and its
    # fixed baseline): the same configs; `FILE --resume` after a cut between them
    path = _write(tmp_path, TWO_EXPERIMENTS)
    storage = tmp_path / "results"
    base = ["tune", str(path), "--storage-path", str(storage), "--verbose", "0"]
    assert main([*base, "--experiment", "a"]) == 0  # as if cut before 'b' started
    first_a = _trial_rows(storage / "a")
    assert not (storage / "b").exists()
    assert main([*base, "--resume"]) == 0
    assert _trial_rows(storage / "a") == first_a  # finished trials are not run again
    b = _trial_rows(storage / "b")
    assert len(b) == 2 and all(len(rows) == 1 for rows in b.values())
    # the experiment's seed seeds the sampler too: both drew the same two learning rates
    lrs = {
        name: sorted(r[0]["config"]["lr"] for r in _trial_rows(storage / name).values())
        for name in ("a", "b")
    }
    assert lrs["a"] == lrs["b"] and lrs["a"][0] != lrs["a"][1]


def test_tune_file_resume_refuses_an_experiment_started_with_other_settings(tmp_path, capsys):
    from hierl.tune.experiments import EXPERIMENT_FILE

    path = _write(tmp_path, TWO_EXPERIMENTS)
    storage = tmp_path / "results"
    (storage / "a").mkdir(parents=True)
    started = load_experiments(path)["a"]
    started.stop = {"training_iteration": 7}
    (storage / "a" / EXPERIMENT_FILE).write_text(json.dumps(started.to_dict()))
    argv = ["tune", str(path), "--storage-path", str(storage), "--resume"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "experiment 'a'" in err and "(stop differ from the file's)" in err
    assert f"hierl tune --resume {storage / 'a'}" in err
    assert not (storage / "b").exists()  # nothing ran


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tune", "--resume"], "--resume without DIR resumes the experiments of FILE"),
        (["tune", "F.yaml", "--resume", "--stop", "training_iteration=2"], "--stop does not go"),
    ],
)
def test_tune_file_resume_bad_arguments_are_one_error(tmp_path, capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
