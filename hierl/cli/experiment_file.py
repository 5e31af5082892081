"""``hierl train --config FILE`` with an experiment file (``examples/tuned/``): one
experiment's algorithm, env, stop conditions and config, as ``rllib train -f`` runs a
tuned file.

An experiment file maps experiment names to experiments, each with a ``run`` key
(``hierl.tune.experiments``, which parses and validates it); a config file never has a
top-level mapping with ``run``.  Command-line flags override what the experiment gives:
``--algo``, ``--env``, ``--stop`` (replacing the file's conditions), ``--checkpoint-freq``,
``--seed``, and later ``--config`` / ``--set`` values over its config.

Without any ``--config``, ``hierl train --algo ALGO --env ENV`` trains with the tuned file
of ``examples/tuned/`` whose experiment runs ALGO on ENV, if there is one
(``tuned_experiments``): the task's settings, as RL Zoo's ``train.py`` reads its
per-env hyperparameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hierl.cli.common import CLIError

TUNE_ONLY = ("num_samples", "scheduler", "max_concurrent_trials", "callbacks")
"""Experiment keys that only Ray Tune uses (``hierl tune FILE``); ``hierl train`` runs
one trial and ignores them, saying so."""


@dataclasses.dataclass
class TrainExperiment:
    """What ``hierl train`` takes from one experiment of an experiment file."""

    name: str
    """The experiment's name in the file."""
    algo: str
    """Its ``run``: the algorithm."""
    config: dict[str, Any]
    """Its config, with ``env`` and the seed of its first trial folded in."""
    stop: dict[str, float]
    """Its stop conditions."""
    checkpoint_freq: int
    """Its iterations between checkpoints."""
    ignored: tuple[str, ...]
    """The Tune-only keys it sets (``TUNE_ONLY``), ignored by a single run."""


TUNED_DIR = Path(__file__).resolve().parents[2] / "examples" / "tuned"
"""The tuned experiment files of a source checkout (absent from an installed wheel)."""


def tuned_experiments(algo: str, env: str) -> list[tuple[Path, str]]:
    """``(file, experiment name)`` of every experiment in ``TUNED_DIR`` that runs ``algo``
    (any case) on ``env`` with one config (no search), files in name order; [] when there
    is no such directory.  A file that cannot be read is skipped: it is not the one asked
    for."""
    import yaml

    from hierl.yaml_loader import load_yaml

    found = []
    for path in sorted(TUNED_DIR.glob("*.yaml")):
        try:
            data = load_yaml(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if not is_experiment_file(data):
            continue
        for name, body in data.items():
            config = body.get("config") if isinstance(body.get("config"), Mapping) else {}
            runs = str(body["run"]).lower() == algo.lower()
            if runs and body.get("env", config.get("env")) == env:
                from hierl.tune.experiments import searched_keys  # imports Ray Tune

                if not searched_keys(config):
                    found.append((path, str(name)))
    return found


def is_experiment_file(data: Any) -> bool:
    """True when ``data`` (a parsed --config file) maps names to experiments (mappings
    with a ``run`` key) rather than config keys to values."""
    return (
        isinstance(data, Mapping)
        and bool(data)
        and all(isinstance(v, Mapping) and "run" in v for v in data.values())
    )


def train_experiment(path: str, name: str | None) -> TrainExperiment:
    """Experiment ``name`` of the experiment file at ``path`` (the only one when ``name`` is
    None), validated as ``hierl tune`` validates it; CLIError naming the file and what is
    wrong, e.g. several experiments and no ``--experiment``, or a search space."""
    from hierl.config import ConfigError
    from hierl.tune.experiments import ExperimentSpec, load_experiments, searched_keys

    try:
        experiments = load_experiments(path)
    except ConfigError as e:
        raise CLIError(str(e)) from None
    if name is None:
        if len(experiments) > 1:
            raise CLIError(
                f"experiment file '{path}' holds {len(experiments)} experiments "
                f"({', '.join(experiments)}): name the one to train with --experiment NAME"
            )
        name = next(iter(experiments))
    if name not in experiments:
        raise CLIError(f"no experiment '{name}' in '{path}'; it has: {', '.join(experiments)}")
    spec = experiments[name]
    searched = searched_keys(spec.config)
    if searched:
        raise CLIError(
            f"experiment '{name}' in '{path}' searches {', '.join(searched)}: 'hierl train' "
            f"runs one config; run the search with 'hierl tune {path}'"
        )
    config = dict(spec.config)
    if spec.env is not None:
        config["env"] = spec.env
    config.setdefault("seed", spec.seed)  # the seed 'hierl tune' gives its first trial
    defaults = {f.name: f for f in dataclasses.fields(ExperimentSpec)}
    ignored = tuple(k for k in TUNE_ONLY if getattr(spec, k) != _default(defaults[k]))
    stop = {}
    for key, value in spec.stop.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CLIError(
                f"experiment '{name}' in '{path}': stop.{key} = {value!r} is not a number"
            )
        stop[str(key)] = float(value)
    return TrainExperiment(
        name=name,
        algo=spec.run,
        config=config,
        stop=stop,
        checkpoint_freq=spec.checkpoint_freq,
        ignored=ignored,
    )


def _default(field: dataclasses.Field) -> Any:
    """A dataclass field's default value."""
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default
