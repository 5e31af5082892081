"""Experiment files: YAML describing one or more Tune experiments, run by ``hierl tune FILE``.

The format follows RLlib's tuned examples; every key is checked before any trial runs
(an unknown key, algorithm, scheduler or config key is an error naming it)::

    cartpole-ppo:                    # experiment name
      run: PPO                       # algorithm (hierl list)
      env: CartPole-v1
      stop: {episode_reward_mean: 150, timesteps_total: 100000}
      num_samples: 2                 # samples of the search space (x each grid point)
      checkpoint_freq: 5             # iterations between checkpoints (0: at the end only)
      metric: episode_reward_mean    # what schedulers and the summary rank by (max)
      scheduler:                     # optional: fifo | asha | hyperband | pbt, with the
        type: asha                   # scheduler's own keyword arguments
        grace_period: 2
      config:                        # the algorithm's config, with search spaces
        lr: {grid_search: [0.001, 0.0005]}
        clip_param: {uniform: [0.1, 0.3]}

Search spaces: ``{grid_search: [...]}``, ``{choice: [...]}``, ``{uniform: [lo, hi]}``,
``{loguniform: [lo, hi]}``, ``{randint: [lo, hi]}``; PBT's ``hyperparam_mutations`` take
the same forms or a plain list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from hierl.config import Config, ConfigError, suggest
from hierl.tune.trainable import DEFAULT_METRIC, DEFAULT_MODE, trainable, validate_param_space

SEARCH_SPACES = ("grid_search", "choice", "uniform", "loguniform", "randint")
SCHEDULERS = ("fifo", "asha", "hyperband", "pbt")


@dataclasses.dataclass
class ExperimentSpec(Config):
    """One experiment of an experiment file."""

    run: str = ""
    """Algorithm name (``hierl list``)."""
    env: Any = None
    """Gymnasium id or registered env name (may also be given in ``config``)."""
    stop: dict = dataclasses.field(default_factory=dict)
    """Stop a trial when any ``result[key] >= value`` (e.g. ``timesteps_total``)."""
    num_samples: int = 1
    """Samples drawn from the search space (each grid point is repeated this often)."""
    checkpoint_freq: int = 0
    """Iterations between checkpoints (0: only at the end)."""
    checkpoint_at_end: bool = True
    """Checkpoint every trial when it stops."""
    metric: str = DEFAULT_METRIC
    """Result key that schedulers and the summary rank trials by."""
    mode: Literal["max", "min"] = DEFAULT_MODE
    """Whether a larger or smaller ``metric`` is better."""
    scheduler: dict = dataclasses.field(default_factory=dict)
    """``{type: fifo|asha|hyperband|pbt, ...keyword arguments of that scheduler}``."""
    max_concurrent_trials: int = 0
    """Trials running at once (0: as many as the resources allow)."""
    config: dict = dataclasses.field(default_factory=dict)
    """The algorithm's config; values may be search spaces."""

    def __post_init__(self) -> None:
        self.check("run", bool(self.run), "is required (an algorithm name, see 'hierl list')")
        self.check("num_samples", self.num_samples >= 1, "must be >= 1")
        self.check("checkpoint_freq", self.checkpoint_freq >= 0, "must be >= 0")
        self.check("max_concurrent_trials", self.max_concurrent_trials >= 0, "must be >= 0")

    def param_space(self) -> dict[str, Any]:
        """The algorithm config with Tune search spaces (``env`` folded in)."""
        space = search_space(self.config)
        if self.env is not None:
            space["env"] = self.env
        return space


def search_space(value: Any) -> Any:
    """Turn ``{grid_search: [...]}``-style dicts (anywhere in ``value``) into Tune objects."""
    from ray import tune

    if isinstance(value, Mapping):
        if len(value) == 1:
            ((kind, args),) = value.items()
            if kind == "grid_search":
                return tune.grid_search(list(args))
            if kind == "choice":
                return tune.choice(list(args))
            if kind in ("uniform", "loguniform", "randint"):
                lo, hi = args
                return getattr(tune, kind)(lo, hi)
        return {k: search_space(v) for k, v in value.items()}
    return value


def load_experiments(path: str | Path) -> dict[str, ExperimentSpec]:
    """Read and validate an experiment file (YAML); ConfigError names what is wrong."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read experiment file '{path}': {e}") from e
    if not isinstance(data, Mapping) or not data:
        raise ConfigError(f"experiment file '{path}' must map experiment names to experiments")
    experiments = {}
    for name, body in data.items():
        try:
            spec = ExperimentSpec.from_dict(body)
            validate_param_space(spec.run, spec.param_space())
            make_scheduler(spec)  # bad scheduler arguments fail now, not in a trial
        except ConfigError as e:
            raise ConfigError(f"experiment '{name}' in '{path}': {e}") from e
        experiments[str(name)] = spec
    return experiments


def make_scheduler(spec: ExperimentSpec) -> Any:
    """The Tune trial scheduler of ``spec`` (FIFO when none is given)."""
    from ray.tune import schedulers

    options = dict(spec.scheduler)
    kind = options.pop("type", "fifo")
    classes = {
        "fifo": schedulers.FIFOScheduler,
        "asha": schedulers.ASHAScheduler,
        "hyperband": schedulers.HyperBandScheduler,
        "pbt": schedulers.PopulationBasedTraining,
    }
    if kind not in classes:
        raise ConfigError(
            f"unknown scheduler type '{kind}'{suggest(kind, SCHEDULERS)}; "
            f"valid: {', '.join(SCHEDULERS)}"
        )
    if kind == "pbt":
        mutations = options.get("hyperparam_mutations", {})
        options["hyperparam_mutations"] = {k: search_space(v) for k, v in mutations.items()}
        options.setdefault("time_attr", "training_iteration")
    try:
        return classes[kind](**options)
    except TypeError as e:
        raise ConfigError(f"scheduler '{kind}': {e}") from e


def run_experiment(
    name: str, spec: ExperimentSpec, storage_path: str | Path | None = None, verbose: int = 1
) -> Any:
    """Run one experiment with Tune; returns its ``ResultGrid``."""
    from ray import tune

    tuner = tune.Tuner(
        trainable(spec.run),
        param_space=spec.param_space(),
        tune_config=tune.TuneConfig(
            metric=spec.metric,
            mode=spec.mode,
            scheduler=make_scheduler(spec),
            num_samples=spec.num_samples,
            max_concurrent_trials=spec.max_concurrent_trials or None,
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=str(Path(storage_path).resolve()) if storage_path else None,
            stop=dict(spec.stop) or None,
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_frequency=spec.checkpoint_freq,
                checkpoint_at_end=spec.checkpoint_at_end,
            ),
            verbose=verbose,
        ),
    )
    return tuner.fit()


def summary_rows(name: str, spec: ExperimentSpec, results: Any, top: int = 3) -> list[dict]:
    """The best ``top`` trials of an experiment by its metric, as table rows."""
    searched = _searched_keys(spec.config)
    rows = []
    for result in results:
        metrics = result.metrics or {}
        value = metrics.get(spec.metric)
        rows.append(
            {
                "experiment": name,
                "trial": metrics.get("trial_id", "?"),
                "status": "ERROR" if result.error else "done",
                spec.metric: value,
                "iterations": metrics.get("training_iteration"),
                "timesteps": metrics.get("timesteps_total"),
                "config": {k: _get(result.config or {}, k) for k in searched},
            }
        )
    sign = -1 if spec.mode == "max" else 1
    rows.sort(key=lambda r: (r[spec.metric] is None, sign * (r[spec.metric] or 0.0)))
    return rows[:top]


def _searched_keys(config: Mapping[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for k, v in config.items():
        if isinstance(v, Mapping):
            if len(v) == 1 and next(iter(v)) in SEARCH_SPACES:
                keys.append(prefix + k)
            else:
                keys.extend(_searched_keys(v, f"{prefix}{k}/"))
    return keys


def _get(config: Mapping[str, Any], path: str) -> Any:
    for part in path.split("/"):
        config = config.get(part, {}) if isinstance(config, Mapping) else {}
    return config
