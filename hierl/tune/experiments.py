"""Experiment files: YAML describing one or more Tune experiments, run by ``hierl tune FILE``.

The format follows RLlib's tuned examples; every key is checked before any trial runs
(an unknown key, algorithm, scheduler or config key is an error naming it):

    cartpole-ppo:                    # experiment name
      run: PPO                       # algorithm (hierl list)
      env: CartPole-v1
      stop: {episode_reward_mean: 150, timesteps_total: 100000}
      num_samples: 2                 # samples of the search space (x each grid point)
      seed: 0                        # base seed: trial i gets seed + i (unless config
                                     # sets seed: then every trial uses that one)
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
the same forms or a plain list.  Any other value of a one-key dict with one of these names
is a ConfigError naming the key.  Numbers such as ``1e-3`` are floats
(``hierl.yaml_loader``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from ray import tune

from hierl.config import Config, ConfigError, suggest
from hierl.files import atomic_write
from hierl.tune.trainable import DEFAULT_METRIC, DEFAULT_MODE, trainable, validate_param_space

SEARCH_SPACES = ("grid_search", "choice", "uniform", "loguniform", "randint")
SCHEDULERS = ("fifo", "asha", "hyperband", "pbt")
EXPERIMENT_FILE = "hierl_experiment.json"
"""The experiment's spec, saved in its Tune directory for ``resume_experiment``."""
RESOURCE_WAIT_LOG_S = 60.0
"""A trial PENDING this long gets one log line saying which resources it waits for."""

logger = logging.getLogger(__name__)


def _ray_resources() -> tuple[dict[str, float], dict[str, float]]:
    """``(free now, in all)`` resources of the connected Ray cluster."""
    import ray

    return dict(ray.available_resources()), dict(ray.cluster_resources())


class ResourceWaitLogger(tune.Callback):
    """Logs one line for each trial that stays PENDING for ``after_s`` seconds: what it
    reserves and what the cluster has free (other trials hold the rest).

    A trial that could never fit fails ``Tuner.fit()`` at once
    (``TrainerTrainable.default_resource_request``); this covers the ones that fit but
    wait for busy resources.  ``hierl tune`` installs it; with ``tune.Tuner`` pass it in
    ``tune.RunConfig(callbacks=[ResourceWaitLogger()])``.
    """

    def __init__(
        self,
        after_s: float = RESOURCE_WAIT_LOG_S,
        clock: Callable[[], float] = time.monotonic,
        resources: Callable[[], tuple[dict[str, float], dict[str, float]]] = _ray_resources,
    ):
        self.after_s = after_s
        self._clock = clock
        self._resources = resources
        self._pending_since: dict[str, float] = {}  # trial id → when it was first seen pending
        self._logged: set[str] = set()

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        """Called by Tune at every step of its loop (many times a second)."""
        now = self._clock()
        pending = {t.trial_id: t for t in trials if t.status == "PENDING"}
        for trial_id in list(self._pending_since):
            if trial_id not in pending:  # started (or ended): a new wait counts afresh
                del self._pending_since[trial_id]
                self._logged.discard(trial_id)
        for trial_id, trial in pending.items():
            waited = now - self._pending_since.setdefault(trial_id, now)
            if waited >= self.after_s and trial_id not in self._logged:
                self._logged.add(trial_id)
                logger.warning(self.message(trial, waited))

    def message(self, trial: Any, waited_s: float) -> str:
        """The log line for ``trial``, PENDING for ``waited_s`` seconds."""
        pgf = trial.placement_group_factory
        need = {k: v for k, v in pgf.required_resources.items() if v > 0}
        free, total = self._resources()
        keys = sorted(need)

        def amounts(resources: Mapping[str, float]) -> str:
            return " and ".join(f"{resources.get(k, 0.0):g} {k}" for k in keys) or "nothing"

        return (
            f"trial {trial} has waited {waited_s:.0f}s to start: it reserves "
            f"{amounts(need)} ({len(pgf.bundles)} bundles: {pgf.bundles}); the Ray cluster "
            f"has {amounts(free)} free of {amounts(total)} (running trials hold the rest)"
        )


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
    seed: int = 0
    """Base seed: trial ``i`` of the experiment (in Tune's trial order) gets seed
    ``seed + i``, so repeated samples of a grid point differ; a ``seed`` in ``config``
    (fixed or a search space) is used as is instead.  It also seeds the sampling of the
    search space: two experiments with the same space and seed draw the same configs."""
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
    callbacks: list = dataclasses.field(default_factory=list)
    """Ray Tune's logger integrations, by name, each alone or with its settings:
    ``[wandb, {mlflow: {tracking_uri: ..., experiment_name: ...}}]`` (``wandb``:
    ``WandbLoggerCallback``; ``mlflow``: ``MLflowLoggerCallback``; their keyword
    arguments are the settings).  Tune's JSON, CSV and TensorBoard logs are always on.
    Keep secrets out of the settings (``WANDB_API_KEY``, ``MLFLOW_TRACKING_TOKEN`` in the
    environment): the experiment's spec and Tune's state are saved in its directory."""

    def __post_init__(self) -> None:
        self.check("run", bool(self.run), "is required (an algorithm name, see 'hierl list')")
        self.check("num_samples", self.num_samples >= 1, "must be >= 1")
        self.check("checkpoint_freq", self.checkpoint_freq >= 0, "must be >= 0")
        self.check("max_concurrent_trials", self.max_concurrent_trials >= 0, "must be >= 0")

    def param_space(self) -> dict[str, Any]:
        """The algorithm config with Tune search spaces (``env`` folded in)."""
        space = search_space(self.config, "config")
        if self.env is not None:
            space["env"] = self.env
        return space


SEARCH_SPACE_FORMS = (
    "{grid_search: [v1, v2, ...]}, {choice: [v1, v2, ...]}, {uniform: [low, high]}, "
    "{loguniform: [low, high]} (0 < low), {randint: [low, high]} (integers; high excluded)"
)
"""The valid search-space specs, for error messages."""


def search_space(value: Any, path: str = "config") -> Any:
    """Turn ``{grid_search: [...]}``-style dicts (anywhere in ``value``) into Tune objects.

    A one-key dict whose key is a search-space name must be a valid spec of that kind
    (``SEARCH_SPACE_FORMS``); else ConfigError naming the key (``path``, e.g.
    ``config.lr``), the spec and the valid forms.
    """
    if isinstance(value, Mapping):
        if len(value) == 1 and next(iter(value)) in SEARCH_SPACES:
            ((kind, args),) = value.items()
            return _search_space(str(kind), args, path)
        return {k: search_space(v, f"{path}.{k}") for k, v in value.items()}
    return value


def _search_space(kind: str, args: Any, path: str) -> Any:
    from ray import tune

    def bad(why: str) -> ConfigError:
        return ConfigError(
            f"'{path}': bad search space {{{kind}: {args!r}}}: {why}; "
            f"valid forms: {SEARCH_SPACE_FORMS}"
        )

    if not isinstance(args, (list, tuple)):
        raise bad(f"{kind} takes a list, got {type(args).__name__}")
    if kind in ("grid_search", "choice"):
        if not args:
            raise bad(f"{kind} needs at least one value")
        return getattr(tune, kind)(list(args))
    if len(args) != 2:
        raise bad(f"{kind} takes exactly [low, high], got {len(args)} value(s)")
    lo, hi = args
    if kind == "randint":
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in args):
            raise bad("randint bounds must be integers")
    elif not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in args):
        raise bad(f"{kind} bounds must be numbers")
    if not lo < hi:
        raise bad("low must be < high")
    if kind == "loguniform" and lo <= 0:
        raise bad("loguniform needs 0 < low")
    return getattr(tune, kind)(lo, hi)


def load_experiments(path: str | Path) -> dict[str, ExperimentSpec]:
    """Read and validate an experiment file (YAML); ConfigError names what is wrong."""
    import yaml

    from hierl.yaml_loader import load_yaml

    try:
        data = load_yaml(Path(path).read_text())
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
            make_logger_callbacks(spec.callbacks)
        except ConfigError as e:
            raise ConfigError(f"experiment '{name}' in '{path}': {e}") from e
        experiments[str(name)] = spec
    return experiments


LOGGER_CALLBACKS: dict[str, tuple[str, str]] = {
    "wandb": ("ray.air.integrations.wandb:WandbLoggerCallback", "wandb"),
    "mlflow": ("ray.air.integrations.mlflow:MLflowLoggerCallback", "mlflow"),
}
"""``callbacks`` names: (the Tune callback class, the package it needs; ``pip install
'hierl[NAME]'`` installs it)."""


def make_logger_callbacks(entries: list[Any]) -> list[Any]:
    """The Tune callbacks named by an experiment's ``callbacks`` (see ExperimentSpec);
    ConfigError for an unknown name, bad settings or a missing package."""
    import importlib
    import importlib.util

    out = []
    for entry in entries:
        if isinstance(entry, str):
            name, settings = entry, {}
        elif isinstance(entry, Mapping) and len(entry) == 1:
            ((name, settings),) = entry.items()
            settings = {} if settings is None else settings
        else:
            raise ConfigError(
                f"callbacks entry {entry!r} is invalid: give a name or {{name: {{settings}}}}"
                f" with a name of {', '.join(LOGGER_CALLBACKS)}"
            )
        if name not in LOGGER_CALLBACKS:
            raise ConfigError(
                f"unknown callback '{name}'{suggest(str(name), list(LOGGER_CALLBACKS))}; "
                f"valid: {', '.join(LOGGER_CALLBACKS)}"
            )
        if not isinstance(settings, Mapping):
            raise ConfigError(f"callback '{name}': settings must be a mapping, got {settings!r}")
        target, package = LOGGER_CALLBACKS[name]
        if importlib.util.find_spec(package) is None:
            raise ConfigError(
                f"callback '{name}' needs the '{package}' package: pip install 'hierl[{name}]'"
            )
        module, cls = target.split(":")
        try:
            out.append(getattr(importlib.import_module(module), cls)(**settings))
        except (TypeError, RuntimeError) as e:
            raise ConfigError(f"callback '{name}': {e}") from e
    return out


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
        if not isinstance(mutations, Mapping):
            raise ConfigError(
                "scheduler 'pbt': hyperparam_mutations must map config keys to a list of "
                f"values or a search space ({SEARCH_SPACE_FORMS}), got {mutations!r}"
            )
        options["hyperparam_mutations"] = {
            k: search_space(v, f"scheduler.hyperparam_mutations.{k}") for k, v in mutations.items()
        }
        options.setdefault("time_attr", "training_iteration")
    try:
        return classes[kind](**options)
    except TypeError as e:
        raise ConfigError(f"scheduler '{kind}': {e}") from e


def run_experiment(
    name: str, spec: ExperimentSpec, storage_path: str | Path | None = None, verbose: int = 1
) -> Any:
    """Run one experiment with Tune; returns its ``ResultGrid``.  The experiment's
    directory (``storage_path/name``) also gets ``spec`` (``EXPERIMENT_FILE``), so that
    ``resume_experiment`` can continue it."""
    from ray import tune
    from ray.tune.search import BasicVariantGenerator

    run_config = _run_config(name, spec, storage_path, verbose)
    exp_dir = experiment_dir(name, storage_path)
    exp_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(spec.to_dict(), indent=2, default=str) + "\n"
    atomic_write(exp_dir / EXPERIMENT_FILE, lambda tmp: tmp.write_text(text))
    tuner = tune.Tuner(
        trainable(spec.run, base_seed=spec.seed),
        param_space=spec.param_space(),
        tune_config=tune.TuneConfig(
            metric=spec.metric,
            mode=spec.mode,
            # CRUCIAL: a seeded sampler, so that two experiments with the same space and
            # seed (a PBT population and its fixed baseline) start from the same configs.
            search_alg=BasicVariantGenerator(random_state=spec.seed),
            scheduler=make_scheduler(spec),
            num_samples=spec.num_samples,
            max_concurrent_trials=spec.max_concurrent_trials or None,
        ),
        run_config=run_config,
    )
    return tuner.fit()


def _run_config(
    name: str, spec: ExperimentSpec, storage_path: str | Path | None, verbose: int
) -> Any:
    from ray import tune

    return tune.RunConfig(
        name=name,
        storage_path=str(Path(storage_path).resolve()) if storage_path else None,
        stop=dict(spec.stop) or None,
        checkpoint_config=tune.CheckpointConfig(
            checkpoint_frequency=spec.checkpoint_freq,
            checkpoint_at_end=spec.checkpoint_at_end,
        ),
        verbose=verbose,
        callbacks=[ResourceWaitLogger(), *make_logger_callbacks(spec.callbacks)],
    )


def experiment_dir(name: str, storage_path: str | Path | None = None) -> Path:
    """The directory ``run_experiment`` gives experiment ``name`` (``storage_path/name``,
    Tune's default storage path when None)."""
    from ray import tune

    storage = str(Path(storage_path).resolve()) if storage_path else None
    return Path(str(tune.RunConfig(name=name, storage_path=storage).storage_path)) / name


def _saved_spec(path: Path) -> ExperimentSpec:
    """The spec ``run_experiment`` saved in experiment directory ``path``."""
    try:
        data = json.loads((path / EXPERIMENT_FILE).read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"'{path}' is not an experiment directory of 'hierl tune' (no {EXPERIMENT_FILE}); "
            "give STORAGE_PATH/EXPERIMENT_NAME"
        ) from None
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read '{path / EXPERIMENT_FILE}': {e}") from None
    return ExperimentSpec.from_dict(data)


def _restore(path: Path, spec: ExperimentSpec) -> Any:
    from ray import tune

    tuner = tune.Tuner.restore(
        str(path), trainable(spec.run, base_seed=spec.seed), resume_errored=True
    )
    return tuner.fit()


def resume_experiment(path: str | Path) -> tuple[str, ExperimentSpec, Any]:
    """Continue the experiment that ``run_experiment`` started in directory ``path``
    (``storage_path/name``) with Tune's ``Tuner.restore``: unfinished and errored trials
    resume from their last checkpoints.  Returns ``(name, spec, ResultGrid)``.

    ``path`` must be trusted: Tune unpickles its experiment state.  ConfigError when
    ``path`` holds no experiment of ``hierl tune``.
    """
    from ray import tune

    path = Path(path).expanduser().resolve()
    spec = _saved_spec(path)
    if not tune.Tuner.can_restore(str(path)):
        raise ConfigError(
            f"'{path}' holds no Tune experiment state to restore (did its first trial start?)"
        )
    return path.name, spec, _restore(path, spec)


def resume_or_run_experiment(
    name: str, spec: ExperimentSpec, storage_path: str | Path | None = None, verbose: int = 1
) -> Any:
    """``hierl tune FILE --resume``: continue experiment ``name`` of a file where
    ``storage_path/name`` holds its Tune state (trials finished stay finished; the others
    resume from their last checkpoints), else run it from the start.  Returns its
    ``ResultGrid``.

    Raises:
        ConfigError: the directory holds an experiment whose saved spec differs from
            ``spec`` (the file was edited since): naming the keys that differ.
    """
    from ray import tune

    path = experiment_dir(name, storage_path)
    if (path / EXPERIMENT_FILE).exists():
        saved = json.loads(json.dumps(_saved_spec(path).to_dict(), default=str))
        now = json.loads(json.dumps(spec.to_dict(), default=str))
        changed = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
        if changed:
            raise ConfigError(
                f"experiment '{name}' in '{path}' was started with other settings "
                f"({', '.join(changed)} differ from the file's): 'hierl tune --resume {path}' "
                "continues it as it was started; another --storage-path starts afresh"
            )
    if not tune.Tuner.can_restore(str(path)):
        return run_experiment(name, spec, storage_path, verbose)
    return _restore(path, spec)


def summary_rows(name: str, spec: ExperimentSpec, results: Any, top: int = 3) -> list[dict]:
    """The best ``top`` trials of an experiment by its metric, as table rows."""
    searched = searched_keys(spec.config)
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


def searched_keys(config: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The keys of ``config`` (nested ones as ``a/b``) whose values are search spaces."""
    keys = []
    for k, v in config.items():
        if isinstance(v, Mapping):
            if len(v) == 1 and next(iter(v)) in SEARCH_SPACES:
                keys.append(prefix + k)
            else:
                keys.extend(searched_keys(v, f"{prefix}{k}/"))
    return keys


def _get(config: Mapping[str, Any], path: str) -> Any:
    for part in path.split("/"):
        config = config.get(part, {}) if isinstance(config, Mapping) else {}
    return config
