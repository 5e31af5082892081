"""The ``hierl`` command line: train an algorithm, roll out a checkpoint, list algorithms.

Examples::

    hierl train --algo PPO --env CartPole-v1
    hierl train --algo PG --env CartPole-v1 --config cfg.yaml --stop training_iteration=50
    hierl train --algo PPO --env CartPole-v1 --set model.hiddens=[32,32] --set lr=1e-3
    hierl train --resume hierl_results/PPO_CartPole-v1_20250101-120000
    hierl rollout hierl_results/PPO_CartPole-v1_20250101-120000/checkpoints/000042
    hierl export hierl_results/PPO_CartPole-v1_20250101-120000 --format onnx
    hierl serve hierl_results/PPO_CartPole-v1_20250101-120000 --port 8000
    hierl list
    hierl config PPO
    hierl config PPO --yaml > ppo.yaml

User errors (bad arguments, unknown algorithm/env/config key, unreadable files, bad
checkpoints) print one ``hierl: error: ...`` line to stderr and exit with status 2.
Heavy libraries (torch, ray, matplotlib) are imported only by the commands that need them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hierl.loggers import RESULTS_FILE

PROG = "hierl"
TIMESTEPS_CAP = 1_000_000
"""Safety cap added to the default stop conditions."""
PARAMS_FILE = "params.json"
RUN_FILE = "run.json"
"""What ``--resume`` needs besides the checkpoint: the stop conditions and checkpoint
frequency of the run."""
CURVE_FILE = "learning_curve.png"
CHECKPOINTS_DIR = "checkpoints"


class CLIError(Exception):
    """A user error: reported as one ``hierl: error: ...`` line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """ArgumentParser that raises CLIError instead of printing usage and exiting."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise CLIError(f"{message} (see '{self.prog} --help')")


# -- argument parsing ------------------------------------------------------------------
def parse_stop(text: str) -> tuple[str, float]:
    """Parse one ``--stop KEY=VALUE`` into ``(key, target)``."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(
            f"malformed stop condition {text!r}: expected KEY=VALUE, "
            "e.g. episode_reward_mean=475 or training_iteration=100"
        )
    try:
        target = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"stop condition {text!r}: value {value.strip()!r} is not a number"
        ) from None
    if not math.isfinite(target):
        raise argparse.ArgumentTypeError(f"stop condition {text!r}: value must be finite")
    return key, target


def parse_set(text: str) -> tuple[tuple[str, ...], Any]:
    """Parse one ``--set KEY.SUB=VALUE`` into ``(("KEY", "SUB"), value)``; the value is
    read as YAML (``1e-3``, ``true``, ``null``, ``[32, 32]``; anything else a string)."""
    import yaml

    from hierl.yaml_loader import load_yaml

    key, sep, value = text.partition("=")
    path = tuple(part.strip() for part in key.split("."))
    if not sep or not all(path):
        raise argparse.ArgumentTypeError(
            f"malformed override {text!r}: expected KEY=VALUE with KEY a config key or a "
            "dotted path into nested keys, e.g. lr=1e-3 or model.hiddens=[32,32]"
        )
    try:
        parsed = load_yaml(value)
    except yaml.YAMLError as e:
        raise argparse.ArgumentTypeError(
            f"override {text!r}: value {value!r} is not valid YAML: {_one_line(str(e))}"
        ) from None
    return path, parsed


def apply_overrides(
    config: Mapping[str, Any], overrides: Sequence[tuple[tuple[str, ...], Any]]
) -> dict[str, Any]:
    """``config`` with each ``(path, value)`` of ``--set`` applied in order (nested dicts
    created along the path; the config's own ``from_dict`` checks keys and types later)."""
    out = dict(config)
    for path, value in overrides:
        node = out
        for part in path[:-1]:
            child = node.get(part)
            node[part] = child = dict(child) if isinstance(child, Mapping) else {}
            node = child
        node[path[-1]] = value
    return out


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("hierl")
    except Exception:
        return "unknown"


def _algorithm_names() -> list[str]:
    from hierl.algorithms.registry import trainer_names

    return trainer_names()


def _algorithm(text: str) -> str:
    """``--algo`` / ``ALGO``: a registered algorithm name in any case, as registered."""
    from hierl.algorithms.registry import canonical_name
    from hierl.config import ConfigError

    try:
        return canonical_name(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    """The ``hierl`` argument parser with its subcommands."""
    parser = _Parser(
        prog=PROG,
        description="hierl: distributed reinforcement learning on Ray and PyTorch.",
        epilog="Run 'hierl COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    algos = ", ".join(_algorithm_names())

    train = sub.add_parser(
        "train",
        help="train an algorithm on an environment",
        description=textwrap.fill(
            "Train an algorithm until a stop condition holds, logging every iteration to "
            "OUTPUT_DIR/result.jsonl, progress.csv and TensorBoard event files (named as "
            "Ray Tune names them: tensorboard --logdir OUTPUT_DIR), saving checkpoints and "
            "a learning curve. Ctrl-C stops training cleanly after saving a final "
            "checkpoint; --resume OUTPUT_DIR continues a run from its last complete "
            "checkpoint (after Ctrl-C, a crash or a kill).",
            width=79,
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            f"algorithms: {algos}\n"
            "config keys of an algorithm: hierl config ALGO\n\n"
            "example:\n"
            "  hierl train --algo PPO --env CartPole-v1 \\\n"
            '      --config \'{"train_batch_size": 2000, "lr": 3e-4}\' \\\n'
            "      --stop episode_reward_mean=475 --stop timesteps_total=500000 \\\n"
            "      --checkpoint-freq 10\n"
            "  hierl train --resume hierl_results/PPO_CartPole-v1_20250101-120000 \\\n"
            "      --stop timesteps_total=1e6\n\n"
            "Config sources apply in order: --config files/objects, then --set, then "
            "--env/--seed/\n--num-evaluators.\n"
            "Without --stop, training stops when episode_reward_mean reaches the env's "
            f"reward_threshold\n(if it has one) or timesteps_total reaches {TIMESTEPS_CAP}."
        ),
    )
    train.add_argument(
        "--algo",
        type=_algorithm,
        metavar="ALGO",
        help=f"algorithm name, any case (one of: {algos}); required unless --resume",
    )
    train.add_argument(
        "--env",
        metavar="ENV",
        help="Gymnasium env id (e.g. CartPole-v1) or a name given to hierl.register_env; "
        "overrides 'env' in --config",
    )
    train.add_argument(
        "--config",
        action="append",
        metavar="FILE|JSON",
        help="algorithm config: a .json/.yaml/.yml file or an inline JSON object, "
        'e.g. \'{"lr": 0.001, "train_batch_size": 1000}\'; repeatable: merged in order, '
        "a later one overriding the keys it sets (nested dicts such as 'model' merged "
        "key by key, lists replaced)",
    )
    train.add_argument(
        "--set",
        action="append",
        type=parse_set,
        dest="overrides",
        metavar="KEY=VALUE",
        help="set one config key after --config, a dotted path into nested keys; VALUE is "
        "read as YAML (numbers, true/false, null, [lists], strings), e.g. "
        "--set model.hiddens=[32,32] --set lr=1e-3 (repeatable)",
    )
    train.add_argument(
        "--stop",
        action="append",
        type=parse_stop,
        metavar="KEY=VALUE",
        help="stop when result[KEY] >= VALUE (repeatable; stops when ANY condition holds), "
        "e.g. episode_reward_mean=475, timesteps_total=1e6, training_iteration=100, "
        "time_total_s=600",
    )
    train.add_argument(
        "--num-evaluators",
        type=_non_negative_int,
        metavar="N",
        help="remote sampling actors (0: sample in this process, no Ray); "
        "overrides 'num_evaluators' in --config",
    )
    train.add_argument(
        "--output-dir",
        metavar="DIR",
        help="where results, checkpoints and the learning curve go "
        "(default: ./hierl_results/ALGO_ENV_YYYYmmdd-HHMMSS/)",
    )
    train.add_argument(
        "--checkpoint-freq",
        type=_non_negative_int,
        metavar="K",
        help="also checkpoint every K iterations (default 0: only at the end; with "
        "--resume: the run's own)",
    )
    train.add_argument(
        "--seed", type=int, metavar="S", help="random seed; overrides 'seed' in --config"
    )
    train.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the run in output dir DIR from its last complete checkpoint, with "
        "its saved config (a corrupt last checkpoint: the one before), appending to its "
        "logs after dropping the rows logged after that checkpoint; stop conditions count "
        "from the start of the run. Only --stop (e.g. to extend the run), "
        "--checkpoint-freq, --ray-address, --no-curve and --quiet may be given with it",
    )
    train.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="join this Ray cluster (e.g. 10.0.0.1:6379) instead of starting a local one; "
        "overrides 'ray_address' in --config",
    )
    train.add_argument(
        "--no-curve",
        action="store_true",
        help=f"do not plot {CURVE_FILE} (spares matplotlib's import, about 0.5 s)",
    )
    train.add_argument("--quiet", "-q", action="store_true", help="print only the final summary")
    train.set_defaults(func=cmd_train)

    rollout = sub.add_parser(
        "rollout",
        help="run a trained policy from a checkpoint",
        description=(
            "Load a checkpoint written by 'hierl train' and run episodes with its policy, "
            "printing each episode's return and the mean. CHECKPOINT may also be a run's "
            "output dir or its checkpoints/ dir (the latest checkpoint is used)."
        ),
    )
    rollout.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint directory")
    rollout.add_argument(
        "--episodes",
        type=_positive_int,
        metavar="N",
        help="episodes to run (default 10 unless --steps is given)",
    )
    rollout.add_argument(
        "--steps",
        type=_positive_int,
        metavar="N",
        help="stop after N env steps in all, cutting the last episode short (with "
        "--episodes: whichever limit comes first; single-agent envs)",
    )
    rollout.add_argument(
        "--render", action="store_true", help="show the env on screen (render_mode='human')"
    )
    rollout.add_argument(
        "--video-dir",
        metavar="DIR",
        help="record every episode as an mp4 file in DIR (gymnasium RecordVideo; needs "
        "pip install 'hierl[render]')",
    )
    rollout.add_argument(
        "--env",
        metavar="ENV",
        help="play this env instead of the checkpoint's (same observation and action "
        "spaces); the checkpoint's env_config is dropped",
    )
    rollout.add_argument(
        "--env-config",
        metavar="JSON",
        help='env keyword arguments merged over the env_config, e.g. \'{"max_episode_steps": '
        "100}'",
    )
    rollout.add_argument(
        "--explore",
        action="store_true",
        help="sample actions stochastically (default: deterministic/greedy actions)",
    )
    rollout.add_argument("--seed", type=int, metavar="S", help="seed for the env and actions")
    rollout.add_argument(
        "--output",
        metavar="DIR",
        help="write whole episodes to DIR as logged data (Parquet, with each action's "
        "action_logp for off-policy estimation); actions are sampled, and the run's "
        "sub-envs may finish a few more than --episodes",
    )
    rollout.set_defaults(func=cmd_rollout)

    export = sub.add_parser(
        "export",
        help="export a checkpoint's policy as TorchScript or ONNX for serving without hierl",
        description=(
            "Write the greedy policy of a checkpoint as a self-contained model (observation "
            "preprocessing, filter and action selection folded in) plus policy.json, which "
            "says how to call it. CHECKPOINT may also be a run's output dir or its "
            "checkpoints/ dir (the latest checkpoint is used). Loading it needs only torch "
            "(TorchScript) or onnxruntime (ONNX); see hierl.export."
        ),
    )
    export.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint directory")
    export.add_argument(
        "--format",
        default="torchscript",
        metavar="FORMAT",
        help="torchscript (policy.pt) or onnx (policy.onnx, needs pip install "
        "'hierl[export]'); default torchscript",
    )
    export.add_argument(
        "--output",
        metavar="DIR",
        help="directory to write (default: CHECKPOINT_FORMAT beside the checkpoint)",
    )
    export.add_argument(
        "--policy-id",
        metavar="ID",
        help="the policy to export (multi-agent checkpoints; default: the default policy)",
    )
    export.set_defaults(func=cmd_export)

    lst = sub.add_parser(
        "list",
        help="list algorithms",
        description="List the registered algorithms with their default policy optimizer "
        "and a one-line description.",
    )
    lst.add_argument("--names", action="store_true", help="only the names, one per line")
    lst.set_defaults(func=cmd_list)

    cfg = sub.add_parser(
        "config",
        help="show an algorithm's config keys",
        description="Show the config keys of an algorithm with their defaults and meaning "
        "(for 'hierl train --config').",
    )
    cfg.add_argument("algo", type=_algorithm, metavar="ALGO", help="algorithm name (any case)")
    cfg.add_argument(
        "--yaml",
        action="store_true",
        help="print a complete YAML config file (every key with its default, its "
        "documentation as a comment) to edit and pass to 'hierl train --config FILE'",
    )
    cfg.set_defaults(func=cmd_config)

    srv = sub.add_parser(
        "serve",
        help="serve a checkpoint's policy over HTTP (Ray Serve)",
        description=(
            "Deploy the policy of a checkpoint as a Ray Serve application and block until "
            "Ctrl-C: POST /act (observations -> actions, dynamically batched), GET /spec "
            "(spaces, algorithm, iteration, weights hash), GET /healthz. A trainer with "
            "serve_deployment={'app': NAME} pushes new weights to it. CHECKPOINT may also be "
            "a run's output dir or its checkpoints/ dir (the latest checkpoint is used)."
        ),
    )
    srv.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint directory")
    srv.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0: every interface)",
    )
    srv.add_argument("--port", type=_positive_int, default=8000, help="HTTP port (default 8000)")
    srv.add_argument("--name", default="hierl", help="Serve application name (default hierl)")
    srv.add_argument(
        "--route-prefix", default="/", metavar="PREFIX", help="URL prefix of the app (default /)"
    )
    srv.add_argument(
        "--replicas", type=_positive_int, default=1, metavar="N", help="replicas (default 1)"
    )
    srv.add_argument(
        "--num-cpus", type=float, default=1.0, metavar="C", help="CPUs per replica (default 1)"
    )
    srv.add_argument(
        "--max-batch-size",
        type=_positive_int,
        default=32,
        metavar="N",
        help="requests batched into one forward pass (default 32; 1: no batching)",
    )
    srv.add_argument(
        "--batch-wait-ms",
        type=float,
        default=5.0,
        metavar="MS",
        help="how long a batch waits for more requests (default 5)",
    )
    srv.add_argument(
        "--auth-token",
        metavar="TOKEN",
        help="shared token: requests without 'Authorization: Bearer TOKEN' get 401 "
        "(default: $HIERL_SERVE_TOKEN; prefer it, a flag shows in the process list)",
    )
    srv.add_argument("--ray-address", metavar="ADDR", help="join this Ray cluster")
    srv.set_defaults(func=cmd_serve)

    tune = sub.add_parser(
        "tune",
        help="run Ray Tune experiments from a YAML file",
        description=textwrap.fill(
            "Run the experiments of a YAML experiment file with Ray Tune (search spaces, "
            "ASHA/HyperBand/PBT schedulers, checkpoints), showing Tune's progress, then a "
            "table of the best trials of each experiment. Every experiment is checked "
            "before the first trial starts. Format: see hierl/tune/experiments.py and "
            "examples/tune/.",
            width=79,
        ),
    )
    tune.add_argument(
        "file", nargs="?", metavar="FILE", help="experiment file (.yaml); not with --resume"
    )
    tune.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the interrupted Tune experiment in DIR (STORAGE_PATH/NAME, as "
        "'hierl tune' printed it): unfinished trials resume from their last checkpoints, "
        "errored ones too (Tune's Tuner.restore; DIR must be trusted: Tune unpickles its "
        "experiment state)",
    )
    tune.add_argument(
        "--storage-path",
        metavar="DIR",
        help="where Tune writes results and checkpoints (default: ~/ray_results)",
    )
    tune.add_argument(
        "--experiment",
        action="append",
        metavar="NAME",
        help="run only this experiment of the file (repeatable)",
    )
    tune.add_argument(
        "--stop",
        action="append",
        type=parse_stop,
        metavar="KEY=VALUE",
        help="replace every experiment's stop conditions (repeatable), e.g. training_iteration=5",
    )
    tune.add_argument("--ray-address", metavar="ADDR", help="join this Ray cluster")
    tune.add_argument(
        "--verbose", type=int, default=1, choices=[0, 1, 2], help="Tune's progress output"
    )
    tune.set_defaults(func=cmd_tune)

    from hierl.optimizer_bench_options import add_arguments as add_bench_arguments

    bench = sub.add_parser(
        "bench",
        help="microbenchmarks (pick a policy optimizer for your hardware)",
        description="Run a microbenchmark: 'optimizers' drives every policy optimizer with "
        "the same trainer and reports samples/s, updates/s and driver traffic, then the "
        "SGD throughput of Table 3 and the async optimizer's driver overhead.",
    )
    bench.add_argument("target", choices=["optimizers"], help="what to benchmark")
    add_bench_arguments(bench)
    bench.set_defaults(func=cmd_bench)
    return parser


# -- helpers ---------------------------------------------------------------------------
def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def load_config_arg(text: str) -> dict[str, Any]:
    """``--config``: a .json/.yaml/.yml file, or an inline JSON object string."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise CLIError(f"--config: invalid inline JSON: {e}") from None
    else:
        path = Path(text).expanduser()
        suffix = path.suffix.lower()
        if suffix not in (".json", ".yaml", ".yml"):
            if path.exists():
                raise CLIError(f"config file '{path}' must end in .json, .yaml or .yml")
            raise CLIError(
                f"--config {text!r} is neither a .json/.yaml/.yml file nor an inline JSON "
                "object (JSON objects start with '{')"
            )
        try:
            raw = path.read_text()
        except FileNotFoundError:
            raise CLIError(f"config file '{path}' does not exist") from None
        except (OSError, UnicodeDecodeError) as e:
            reason = getattr(e, "strerror", None) or str(e)
            raise CLIError(f"cannot read config file '{path}': {reason}") from None
        if suffix == ".json":
            try:
                data = json.loads(raw)
            except json.JSONDecodeError as e:
                raise CLIError(f"config file '{path}' is not valid JSON: {e}") from None
        else:
            import yaml

            from hierl.yaml_loader import load_yaml

            try:
                data = load_yaml(raw)  # also reads 1e-3 as a float
            except yaml.YAMLError as e:
                raise CLIError(f"config file '{path}' is not valid YAML: {e}") from None
            if data is None:
                data = {}
    if not isinstance(data, dict):
        raise CLIError(
            f"--config must hold a mapping of config keys to values, got {type(data).__name__}"
        )
    return data


def merge_configs(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``override``: nested dicts merged key by key, anything else
    (lists included) replaced; neither argument is modified."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_configs(out[key], value)
        else:
            out[key] = value
    return out


def default_stop(env: Any) -> tuple[dict[str, float], str]:
    """Stop conditions when none are given, and a note on where they come from."""
    threshold = None
    if isinstance(env, str):
        import gymnasium as gym

        spec = gym.registry.get(env)
        threshold = getattr(spec, "reward_threshold", None) if spec is not None else None
    if threshold is not None:
        return (
            {"episode_reward_mean": float(threshold), "timesteps_total": float(TIMESTEPS_CAP)},
            f"default: {env} reward_threshold, capped at {TIMESTEPS_CAP} timesteps",
        )
    return {"timesteps_total": float(TIMESTEPS_CAP)}, "default: no reward_threshold for this env"


def describe_stop(stop: Mapping[str, float]) -> str:
    from hierl.progress import format_target

    return ", ".join(f"{k} >= {format_target(v)}" for k, v in stop.items())


def check_stop_keys(stop: Mapping[str, float], result: Mapping[str, Any]) -> None:
    """Every stop key must be a numeric entry of the result dict."""
    from hierl.config import suggest

    available = sorted(k for k, v in result.items() if _is_number(v))
    for key in stop:
        if key not in result:
            raise CLIError(
                f"unknown stop key '{key}': not in the training results"
                f"{suggest(key, available)}; available keys: {', '.join(available)}"
            )
        if not _is_number(result[key]):
            raise CLIError(
                f"stop key '{key}' is not numeric (value {result[key]!r}); "
                f"numeric keys: {', '.join(available)}"
            )


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def reached_stop(stop: Mapping[str, float], result: Mapping[str, Any]) -> str | None:
    """The first condition ``result[key] >= target`` that holds, described; else None."""
    from hierl.progress import format_target

    for key, target in stop.items():
        try:
            value = float(result.get(key, math.nan))
        except (TypeError, ValueError):
            continue
        if value >= target:  # NaN never reaches a target
            return f"{key} = {value:g} >= {format_target(target)}"
    return None


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "env"


def default_output_dir(algo: str, env: Any) -> Path:
    env_name = env if isinstance(env, str) else getattr(env, "__name__", "env")
    base = Path("hierl_results") / f"{algo}_{_safe_name(env_name)}_{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        path = base.with_name(f"{base.name}-{n}")
        n += 1
    return path


def write_learning_curve(
    results: Sequence[Mapping[str, Any]],
    path: str | os.PathLike,
    title: str,
    reward_target: float | None = None,
) -> Path:
    """Plot episode_reward_mean (min/max band) against timesteps_total to a PNG."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state touched

    def col(key: str) -> list[float]:
        out = []
        for r in results:
            try:
                out.append(float(r.get(key, math.nan)))
            except (TypeError, ValueError):
                out.append(math.nan)
        return out

    xs = col("timesteps_total")
    mean, lo, hi = col("episode_reward_mean"), col("episode_reward_min"), col("episode_reward_max")
    fig = Figure(figsize=(7, 4.5), dpi=100)
    ax = fig.add_subplot()
    if xs:
        ax.fill_between(xs, lo, hi, alpha=0.25, label="episode reward min/max")
        ax.plot(xs, mean, marker="o" if len(xs) <= 30 else None, label="episode_reward_mean")
    if reward_target is not None:
        ax.axhline(reward_target, linestyle="--", color="grey", label=f"target {reward_target:g}")
    ax.set_xlabel("timesteps_total")
    ax.set_ylabel("episode reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if xs or reward_target is not None:
        ax.legend(loc="best")
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)
    return path


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint dir as given, or the latest one under a run dir / checkpoints dir."""
    from hierl.checkpoint import META_FILE

    p = Path(path).expanduser()
    if (p / META_FILE).exists() or not p.is_dir():
        return p
    if (p / CHECKPOINTS_DIR).is_dir():
        p = p / CHECKPOINTS_DIR
    found = sorted(c for c in p.iterdir() if c.is_dir() and (c / META_FILE).exists())
    return found[-1] if found else p


# -- commands --------------------------------------------------------------------------
def _trainer_class(name: str) -> type:
    from hierl.algorithms.registry import get_trainer_class
    from hierl.config import ConfigError

    try:
        return get_trainer_class(name)
    except ConfigError as e:
        raise CLIError(str(e)) from None


def cmd_list(args: argparse.Namespace) -> int:
    from hierl.algorithms.registry import describe

    names = _algorithm_names()
    if args.names:
        print("\n".join(names))
        return 0
    rows = [(name, _default_optimizer(name), describe(name)) for name in names]
    width = max(len(name) for name in names)
    print(f"{'ALGORITHM':<{width}}  {'OPTIMIZER':<9}  DESCRIPTION")
    for name, optimizer, description in rows:
        print(f"{name:<{width}}  {optimizer:<9}  {description}")
    return 0


def _default_optimizer(name: str) -> str:
    """The policy optimizer ``name`` uses unless told otherwise ("-": a nested trainer
    that drives whole trainers, not one optimizer)."""
    config_class = _trainer_class(name).config_class
    return getattr(config_class, "default_optimizer", None) or "-"


def cmd_config(args: argparse.Namespace) -> int:
    from hierl.config import field_docs

    cls = _trainer_class(args.algo)
    config_class = cls.config_class
    config = config_class.from_dict({})
    if args.yaml:
        print(_config_yaml(args.algo, config), end="")
        return 0
    print(f"{args.algo} config keys ({config_class.__name__}), set with --config '{{...}}':")
    _print_fields(config.to_dict(), field_docs(config_class), "  ")
    opt_config = getattr(config, "optimizer_config", None)
    if opt_config is not None:
        print(
            f"  optimizer_config of '{config.optimizer}' ({type(opt_config).__name__}; supported "
            f"optimizers: {', '.join(config_class.supported_optimizers)}), also as flat keys:"
        )
        _print_fields(opt_config.to_dict(), field_docs(type(opt_config)), "    ")
    return 0


def _config_yaml(algo: str, config: Any) -> str:
    from hierl.config_yaml import config_yaml

    title = (
        f"{algo} config ({type(config).__name__}): every key with its default. Edit and run "
        f"'hierl train --algo {algo} --config THIS.yaml' (--env and --set override keys)."
    )
    notes = {}
    opt_config = getattr(config, "optimizer_config", None)
    if opt_config is not None:
        notes["optimizer_config"] = (
            f"These are the settings of optimizer '{config.optimizer}' "
            f"({type(opt_config).__name__}); with another 'optimizer' (supported: "
            f"{', '.join(type(config).supported_optimizers)}), delete them or give that "
            "optimizer's."
        )
    return config_yaml(config, title, notes)


def _print_fields(values: dict[str, Any], docs: dict[str, str], indent: str) -> None:
    for key, value in values.items():
        if key == "optimizer_config":
            continue  # listed with its own docs below
        print(f"{indent}{key} = {json.dumps(value, default=str)}")
        if docs.get(key):
            print(f"{indent}    {_one_line(docs[key])}")


def cmd_tune(args: argparse.Namespace) -> int:
    """Run the experiments of a YAML file with Ray Tune; print the best trials."""

    from hierl.config import ConfigError
    from hierl.evaluators.ray_runtime import ensure_ray
    from hierl.tune.experiments import (
        load_experiments,
        resume_experiment,
        run_experiment,
    )

    if args.resume is not None:
        for flag, value in {
            "FILE": args.file,
            "--experiment": args.experiment,
            "--stop": args.stop,
            "--storage-path": args.storage_path,
        }.items():
            if value is not None:
                raise CLIError(
                    f"--resume continues the experiment in its directory as it was "
                    f"started; {flag} does not go with it"
                )
        ensure_ray(args.ray_address)
        try:
            name, spec, results = resume_experiment(args.resume)
        except ConfigError as e:
            raise CLIError(str(e)) from None
        return _print_best_trials([(name, spec, results)])
    if args.file is None:
        raise CLIError("the following arguments are required: FILE (or --resume DIR)")
    try:
        experiments = load_experiments(args.file)
    except ConfigError as e:
        raise CLIError(str(e)) from None
    if args.experiment:
        unknown = [n for n in args.experiment if n not in experiments]
        if unknown:
            raise CLIError(
                f"no experiment {unknown} in '{args.file}'; it has: {', '.join(experiments)}"
            )
        experiments = {n: experiments[n] for n in args.experiment}
    if args.stop:
        for spec in experiments.values():
            spec.stop = dict(args.stop)
    ensure_ray(args.ray_address)
    done = []
    for name, spec in experiments.items():
        try:
            results = run_experiment(name, spec, args.storage_path, verbose=args.verbose)
        except ConfigError as e:  # e.g. a trial that can never be placed on this cluster
            raise CLIError(str(e)) from None
        done.append((name, spec, results))
    return _print_best_trials(done)


def _print_best_trials(experiments: list[tuple[str, Any, Any]]) -> int:
    """The table of the best trials of each ``(name, spec, ResultGrid)``; the exit status
    (1 if any trial failed)."""
    from rich.console import Console
    from rich.table import Table

    from hierl.tune.experiments import summary_rows

    table = Table(title="best trials")
    for column in ("experiment", "trial", "status", "metric", "iterations", "timesteps", "config"):
        table.add_column(column)
    failed = 0
    for name, spec, results in experiments:
        failed += sum(1 for r in results if r.error)
        for row in summary_rows(name, spec, results):
            value = row[spec.metric]
            table.add_row(
                row["experiment"],
                str(row["trial"]),
                row["status"],
                f"{spec.metric} = {value:.4g}" if _is_number(value) else f"{spec.metric} = -",
                str(row["iterations"]),
                str(row["timesteps"]),
                ", ".join(f"{k}={v}" for k, v in row["config"].items()),
            )
    console = Console()
    if not console.is_terminal:  # a log file: no need to squeeze the table into 80 columns
        console = Console(width=160)
    console.print(table)
    if failed:
        print(f"hierl: {failed} trial(s) failed; see Tune's error files above", file=sys.stderr)
    return 1 if failed else 0


def cmd_bench(args: argparse.Namespace) -> int:
    """``hierl bench optimizers ...``: the optimizer microbenchmarks."""
    from hierl.optimizer_bench import run

    return run(args, _Parser(prog=f"{PROG} bench optimizers"))


def cmd_train(args: argparse.Namespace) -> int:
    """``hierl train``: a new run, or ``--resume`` of one."""
    if args.resume is not None:
        return _resume_train(args)
    if args.algo is None:
        raise CLIError(
            "the following arguments are required: --algo (or --resume DIR to continue a run)"
        )
    from hierl.config import ConfigError

    cls = _trainer_class(args.algo)

    config: dict[str, Any] = {}
    for text in args.config or []:  # later --config values override earlier ones
        config = merge_configs(config, load_config_arg(text))
    config = apply_overrides(config, args.overrides or [])
    if args.env is not None:
        config["env"] = args.env
    if args.num_evaluators is not None:
        config["num_evaluators"] = args.num_evaluators
    if args.seed is not None:
        config["seed"] = args.seed
    if args.ray_address is not None:
        config["ray_address"] = args.ray_address
    if config.get("env") is None:
        raise CLIError("no environment: pass --env ID (e.g. --env CartPole-v1) or set 'env'")
    try:
        trainer_config = cls.config_class.from_dict(config)
    except ValueError as e:  # ConfigError and checks raised by the config itself
        raise CLIError(str(e)) from None
    env = trainer_config.env
    _check_env(env, getattr(trainer_config, "preprocessor_pref", "deepmind"))

    if args.stop:
        stop, stop_note = dict(args.stop), ""
    else:
        stop, stop_note = default_stop(env)

    if args.output_dir is not None:
        out_dir = Path(args.output_dir).expanduser()
        if out_dir.exists() and not out_dir.is_dir():
            raise CLIError(f"--output-dir '{out_dir}' exists and is not a directory")
        results_path = out_dir / RESULTS_FILE
        if results_path.exists() and results_path.stat().st_size > 0:
            raise CLIError(
                f"output dir '{out_dir}' already holds a run ({RESULTS_FILE}); continue it "
                f"with 'hierl train --resume {out_dir}' or choose another --output-dir"
            )
    else:
        out_dir = default_output_dir(args.algo, env)

    title = f"{args.algo} on {_env_name(env)}"
    if not args.quiet:
        print(f"{PROG}: training {title}; output dir {out_dir.resolve()}", flush=True)
        note = f" ({stop_note})" if stop_note else ""
        print(f"stop when any of: {describe_stop(stop)}{note}", flush=True)

    try:
        trainer = cls(trainer_config)
    except ConfigError as e:
        raise CLIError(str(e)) from None

    def start() -> None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CLIError(f"cannot create output dir '{out_dir}': {e.strerror or e}") from None
        _write_json(out_dir / PARAMS_FILE, trainer.config.to_dict())

    return _run_training(trainer, args, stop, args.checkpoint_freq or 0, out_dir, title, [], start)


def _resume_train(args: argparse.Namespace) -> int:
    """``hierl train --resume DIR``: the run in DIR, from its last complete checkpoint."""
    from hierl.algorithms.trainer_base import BaseTrainer
    from hierl.checkpoint import CheckpointError, latest_complete_checkpoint
    from hierl.config import ConfigError
    from hierl.loggers import truncate_logs

    changing = {
        "--config": args.config,
        "--set": args.overrides,
        "--env": args.env,
        "--seed": args.seed,
        "--num-evaluators": args.num_evaluators,
        "--output-dir": args.output_dir,
    }
    for flag, value in changing.items():
        if value is not None:
            raise CLIError(
                f"--resume continues a run with its saved config; {flag} would change it "
                "(only --stop, --checkpoint-freq, --ray-address, --no-curve and --quiet go "
                "with --resume; to train with other settings, start a new run from the old "
                "one's: hierl train --algo ALGO --config DIR/params.json --set KEY=VALUE)"
            )
    run_dir = Path(args.resume).expanduser()
    if not run_dir.is_dir():
        raise CLIError(f"--resume '{run_dir}': no such directory (give a 'hierl train' output dir)")
    try:
        path, meta, skipped = latest_complete_checkpoint(run_dir / CHECKPOINTS_DIR)
    except CheckpointError as e:
        raise CLIError(
            f"cannot resume '{run_dir}': {e} ('hierl train' checkpoints at the end, on "
            "Ctrl-C and every --checkpoint-freq iterations)"
        ) from None
    algo = str(meta.get("algorithm"))
    if args.algo is not None and args.algo != algo:
        raise CLIError(
            f"--algo {args.algo} does not match the run in '{run_dir}': its checkpoint "
            f"'{path}' is of algorithm {algo} (drop --algo, or pass --algo {algo})"
        )
    for bad, why in skipped:
        print(
            f"{PROG}: warning: checkpoint '{bad}' is unusable ({_one_line(why)}); "
            f"resuming from '{path}'",
            file=sys.stderr,
            flush=True,
        )
    saved = _read_run_info(run_dir)
    overrides = {} if args.ray_address is None else {"ray_address": args.ray_address}
    try:
        trainer = BaseTrainer.from_checkpoint(path, **overrides)
    except (CheckpointError, ConfigError) as e:
        raise CLIError(f"cannot resume '{run_dir}': {e}") from None
    try:
        env = trainer.config.env
        if args.stop:
            stop, stop_note = dict(args.stop), ""
        elif "stop" in saved:
            stop, stop_note = saved["stop"], "the run's"
        else:
            stop, stop_note = default_stop(env)
        freq = args.checkpoint_freq
        if freq is None:
            freq = int(saved.get("checkpoint_freq", 0))
        # the logs must match the restored state: drop what came after the checkpoint
        kept = truncate_logs(run_dir, trainer.iteration)
        title = f"{algo} on {_env_name(env)}"
        last = kept[-1] if kept else None
        if last is not None and last.get("training_iteration") == trainer.iteration:
            reason = reached_stop(stop, last)
            if reason is not None:
                print(
                    f"{PROG}: {title} already done ({reason}) at iteration {trainer.iteration}"
                    "; pass --stop to train on"
                )
                trainer.stop()
                return 0
        if not args.quiet:
            print(
                f"{PROG}: resuming {title} from checkpoint {path.resolve()} (iteration "
                f"{trainer.iteration}); output dir {run_dir.resolve()}",
                flush=True,
            )
            note = f" ({stop_note})" if stop_note else ""
            print(f"stop when any of: {describe_stop(stop)}{note}", flush=True)
    except BaseException:
        trainer.stop()
        raise
    return _run_training(trainer, args, stop, freq, run_dir, title, kept, lambda: None)


def _env_name(env: Any) -> str:
    return env if isinstance(env, str) else getattr(env, "__name__", repr(env))


def _write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def _read_run_info(run_dir: Path) -> dict[str, Any]:
    """The run's saved stop conditions and checkpoint frequency ({} if none saved)."""
    try:
        info = json.loads((run_dir / RUN_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    if not isinstance(info, dict):
        return {}
    stop = info.get("stop")
    if not isinstance(stop, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in stop.values()
    ):
        info.pop("stop", None)
    return info


def _run_training(
    trainer: Any,
    args: argparse.Namespace,
    stop: Mapping[str, float],
    checkpoint_freq: int,
    out_dir: Path,
    title: str,
    history: list[dict[str, Any]],
    start: Callable[[], None],
) -> int:
    """Run ``start()`` (which prepares ``out_dir``), record the run's stop conditions,
    train, and always stop the trainer."""
    interrupted = False
    try:
        start()
        _write_json(
            out_dir / RUN_FILE,
            {"algorithm": trainer.name, "stop": dict(stop), "checkpoint_freq": checkpoint_freq},
        )
        return _train_loop(trainer, args, stop, checkpoint_freq, out_dir, title, history)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        try:
            trainer.stop()
        except Exception as e:
            if not interrupted:
                raise
            print(
                f"{PROG}: warning: stopping the trainer failed: {_one_line(str(e))}",
                file=sys.stderr,
            )


def _check_env(env: Any, preprocessor_pref: str) -> None:
    from hierl.evaluators.env import resolve_env_creator

    try:
        resolve_env_creator(env, preprocessor_pref)
    except ValueError as e:
        raise CLIError(str(e)) from None


CURVE_KEYS = ("timesteps_total", "episode_reward_mean", "episode_reward_min", "episode_reward_max")
"""The result keys the learning curve plots."""


def _train_loop(
    trainer: Any,
    args: argparse.Namespace,
    stop: Mapping[str, float],
    checkpoint_freq: int,
    out_dir: Path,
    title: str,
    history: list[dict[str, Any]],
) -> int:
    """Train until a stop condition holds or Ctrl-C, logging every result (``history``:
    the run's results so far, for the learning curve), checkpointing every
    ``checkpoint_freq`` iterations and at the end."""
    from hierl.loggers import ResultLogger
    from hierl.progress import TrainingProgress, format_number

    reward_target = stop.get("episode_reward_mean")
    history = [{k: r.get(k) for k in CURVE_KEYS} for r in history]
    last_saved: int | None = None
    reason: str | None = None
    interrupted = False
    ckpt_root = out_dir / CHECKPOINTS_DIR

    def curve() -> None:
        if not args.no_curve:
            write_learning_curve(history, out_dir / CURVE_FILE, title, reward_target)

    def checkpoint() -> Path:
        nonlocal last_saved
        path = trainer.save(ckpt_root / f"{trainer.iteration:06d}")
        last_saved = trainer.iteration
        curve()
        return path

    first = True
    with (
        ResultLogger(out_dir) as log,
        TrainingProgress(stop, title=title, quiet=args.quiet) as progress,
    ):
        try:
            while True:
                result = trainer.train()
                log.log(result)
                history.append({k: result.get(k) for k in CURVE_KEYS})
                progress.update(result)
                if first:
                    check_stop_keys(stop, result)
                    first = False
                if checkpoint_freq and trainer.iteration % checkpoint_freq == 0:
                    progress.log(f"checkpoint saved: {checkpoint().resolve()}")
                reason = reached_stop(stop, result)
                if reason is not None:
                    break
        except KeyboardInterrupt:
            interrupted = True

    ckpt_path = ckpt_root / f"{trainer.iteration:06d}"
    if interrupted or last_saved != trainer.iteration:
        ckpt_path = checkpoint()
    else:
        curve()
    last = history[-1] if history else {}
    timesteps = format_number(last.get("timesteps_total"), "d")
    stats = (
        f"{trainer.iteration} iterations, {timesteps} timesteps, "
        f"episode_reward_mean {format_number(last.get('episode_reward_mean'))}, "
        f"{trainer.time_total_s:.1f}s"
    )
    if interrupted:
        print(f"{PROG}: {title} interrupted after {stats}")
    else:
        print(f"{PROG}: {title} done ({reason}) after {stats}")
    print(f"checkpoint: {ckpt_path.resolve()}")
    print(f"output dir: {out_dir.resolve()}", flush=True)
    return 0


def cmd_rollout(args: argparse.Namespace) -> int:
    from hierl.algorithms.registry import get_trainer_class
    from hierl.algorithms.rollout import RolloutOptions, log_episodes, rollout
    from hierl.algorithms.trainer import Trainer
    from hierl.checkpoint import CheckpointError, load_checkpoint
    from hierl.config import ConfigError

    path = resolve_checkpoint(args.checkpoint)
    if args.output and (args.render or args.video_dir or args.steps):
        raise CLIError("--output logs whole episodes: it takes no --render, --video-dir or --steps")
    try:
        options = RolloutOptions(
            episodes=args.episodes or (None if args.steps else 10),
            steps=args.steps,
            explore=args.explore,
            seed=args.seed,
            render=args.render,
            video_dir=args.video_dir,
        )
        meta = load_checkpoint(path)[0]
        algo = str(meta.get("algorithm"))
        if not issubclass(get_trainer_class(algo), Trainer):
            raise CLIError(
                f"rollout serves one policy, but '{path}' is a checkpoint of the nested "
                f"algorithm {algo}; load it in Python with BaseTrainer.from_checkpoint"
            )
        overrides = _rollout_env_overrides(args, meta.get("config") or {})
        if args.output:
            overrides.update(
                output=args.output, batch_mode="complete_episodes", rollout_fragment_length=1
            )
        trainer = Trainer.from_checkpoint(path, num_evaluators=0, **overrides)
    except (CheckpointError, ConfigError) as e:
        hint = ""
        if args.env is not None and isinstance(e, CheckpointError):
            hint = f" (--env {args.env} must have the spaces the policy was trained on)"
        raise CLIError(f"{e}{hint}") from None
    if args.seed is not None:
        from hierl.utils import seed_everything

        seed_everything(args.seed)
    returns: list[float] = []
    try:
        if args.output:
            for record in log_episodes(trainer, options.episodes or 1):
                returns.append(record.episode_reward)
                _print_episode(len(returns), record.episode_reward, record.episode_length)
        else:
            for played in rollout(trainer, options):
                record = played.record
                returns.append(record.episode_reward)
                note = " (cut short by --steps)" if played.cut else ""
                _print_episode(len(returns), record.episode_reward, record.episode_length, note)
    except ConfigError as e:
        raise CLIError(str(e)) from None
    finally:
        trainer.stop()  # also finishes the output files
    mean = sum(returns) / len(returns)
    print(f"mean return: {mean:.2f} over {len(returns)} episodes", flush=True)
    if args.output:
        print(f"logged data: {Path(args.output).resolve()}", flush=True)
    if args.video_dir:
        print(f"videos: {Path(args.video_dir).resolve()}", flush=True)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from hierl.algorithms.registry import get_trainer_class
    from hierl.algorithms.trainer import Trainer
    from hierl.checkpoint import CheckpointError, load_checkpoint
    from hierl.config import ConfigError
    from hierl.export import FORMATS
    from hierl.sample_batch import DEFAULT_POLICY_ID

    if args.format not in FORMATS:
        raise CLIError(f"unknown --format {args.format!r}; valid: {', '.join(FORMATS)}")
    path = resolve_checkpoint(args.checkpoint)
    output = Path(args.output) if args.output else path.with_name(f"{path.name}_{args.format}")
    try:
        algo = str(load_checkpoint(path)[0].get("algorithm"))
        if not issubclass(get_trainer_class(algo), Trainer):
            raise CLIError(
                f"export writes one policy, but '{path}' is a checkpoint of the nested "
                f"algorithm {algo}; load it in Python with BaseTrainer.from_checkpoint and "
                "export one of its trainers' policies with Trainer.export_policy"
            )
        trainer = Trainer.from_checkpoint(path, num_evaluators=0, evaluation_interval=0)
    except (CheckpointError, ConfigError) as e:
        raise CLIError(str(e)) from None
    try:
        exported = trainer.export_policy(output, args.format, args.policy_id or DEFAULT_POLICY_ID)
    except ValueError as e:  # ExportError, an unknown policy id
        raise CLIError(str(e)) from None
    finally:
        trainer.stop()
    for written in exported.paths:
        print(written.resolve(), flush=True)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from hierl.checkpoint import CheckpointError
    from hierl.config import ConfigError
    from hierl.serve import ServeError, ServeOptions, deploy, serve_until_interrupted

    path = resolve_checkpoint(args.checkpoint)
    try:
        options = ServeOptions(
            name=args.name,
            host=args.host,
            port=args.port,
            route_prefix=args.route_prefix,
            num_replicas=args.replicas,
            num_cpus_per_replica=args.num_cpus,
            max_batch_size=args.max_batch_size,
            batch_wait_timeout_s=args.batch_wait_ms / 1000.0,
            auth_token=args.auth_token,
            ray_address=args.ray_address,
        )
        app = deploy(path, options)
    except (CheckpointError, ConfigError, ServeError) as e:
        raise CLIError(str(e)) from None
    spec = app.spec
    print(
        f"serving {spec['algorithm']} iteration {spec['iteration']} (weights "
        f"{spec['hash'][:12]}) from {path}",
        flush=True,
    )
    print(f"POST {app.url}/act, GET {app.url}/spec, GET {app.url}/healthz", flush=True)
    print("Ctrl-C stops", flush=True)
    serve_until_interrupted(app)
    return 0


def _rollout_env_overrides(args: argparse.Namespace, saved: Mapping[str, Any]) -> dict[str, Any]:
    """``env`` / ``env_config`` for the rollout trainer: ``--env`` replaces the env (and
    drops the saved env_config), ``--env-config`` is merged over the env_config."""
    overrides: dict[str, Any] = {}
    env_config = dict(saved.get("env_config") or {})
    if args.env is not None:
        overrides["env"], env_config = args.env, {}
    if args.env_config is not None:
        try:
            extra = json.loads(args.env_config)
        except json.JSONDecodeError as e:
            raise CLIError(f"--env-config: invalid JSON: {e}") from None
        if not isinstance(extra, dict):
            raise CLIError(
                f"--env-config must be a JSON object of env keyword arguments, got {extra!r}"
            )
        env_config.update(extra)
    if args.env is not None or args.env_config is not None:
        overrides["env_config"] = env_config
    return overrides


def _print_episode(number: int, total: float, length: int, note: str = "") -> None:
    print(f"episode {number}: return {total:.2f}, length {length}{note}", flush=True)


# -- entry point -----------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """Run the ``hierl`` command line; returns the exit status."""
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help and --version
            sys.stdout.flush()  # here, so that a closed pipe is caught below
            return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
        status = int(args.func(args))
        sys.stdout.flush()
        return status
    except CLIError as e:
        print(f"{PROG}: error: {_one_line(str(e))}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr, flush=True)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `hierl config PPO | head`): no traceback.
        # See "Note on SIGPIPE" in the docs of the signal module: point stdout at
        # devnull so the interpreter's final flush cannot fail again.
        _stdout_to_devnull()
        return 1


def _stdout_to_devnull() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a non-file (tests)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
