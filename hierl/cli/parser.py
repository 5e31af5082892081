"""The ``hierl`` argument parser: every command, its options and their help."""

from __future__ import annotations

import argparse
import textwrap

from hierl.cli.commands import (
    cmd_bench,
    cmd_config,
    cmd_export,
    cmd_list,
    cmd_rollout,
    cmd_serve,
    cmd_tune,
)
from hierl.cli.common import (
    PROG,
    Parser,
    algorithm,
    algorithm_names,
    non_negative_int,
    positive_int,
    version,
)
from hierl.cli.train import CURVE_FILE, TIMESTEPS_CAP, cmd_train, parse_set, parse_stop


def add_allow_import(command: argparse.ArgumentParser) -> None:
    """``--allow-import MODULE``: for the commands that rebuild a trainer from a checkpoint."""
    command.add_argument(
        "--allow-import",
        action="append",
        default=[],
        metavar="MODULE",
        help="let the checkpoint's config import MODULE (or a module in that package) for "
        "callbacks, model.custom_model or an env 'module:Id'; repeatable. Without it, a "
        "checkpoint that names a module is refused",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``hierl`` argument parser with its subcommands."""
    parser = Parser(
        prog=PROG,
        description="hierl: distributed reinforcement learning on Ray and PyTorch.",
        epilog="Run 'hierl COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    algos = ", ".join(algorithm_names())

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
            "  hierl train --algo PPO --env ALE/Pong-v5 --config examples/tuned/pong-ppo.yaml\n"
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
        type=algorithm,
        metavar="ALGO",
        help=f"algorithm name, any case (one of: {algos}); required unless --resume or "
        "an experiment file in --config gives it",
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
        "key by key, lists replaced). An experiment file (as for 'hierl tune', e.g. "
        "examples/tuned/*.yaml) gives its experiment's algorithm, env, stop conditions, "
        "checkpoint frequency and config; --algo, --env, --stop, --checkpoint-freq, "
        "--seed, --set and later --config values override them",
    )
    train.add_argument(
        "--experiment",
        metavar="NAME",
        help="the experiment to train from an experiment file that holds several",
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
        type=non_negative_int,
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
        type=non_negative_int,
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
    add_allow_import(train)
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
        type=positive_int,
        metavar="N",
        help="episodes to run (default 10 unless --steps is given)",
    )
    rollout.add_argument(
        "--steps",
        type=positive_int,
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
    add_allow_import(rollout)
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
    add_allow_import(export)
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
    cfg.add_argument("algo", type=algorithm, metavar="ALGO", help="algorithm name (any case)")
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
    srv.add_argument("--port", type=positive_int, default=8000, help="HTTP port (default 8000)")
    srv.add_argument("--name", default="hierl", help="Serve application name (default hierl)")
    srv.add_argument(
        "--route-prefix", default="/", metavar="PREFIX", help="URL prefix of the app (default /)"
    )
    srv.add_argument(
        "--replicas", type=positive_int, default=1, metavar="N", help="replicas (default 1)"
    )
    srv.add_argument(
        "--num-cpus", type=float, default=1.0, metavar="C", help="CPUs per replica (default 1)"
    )
    srv.add_argument(
        "--max-batch-size",
        type=positive_int,
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
    srv.add_argument(
        "--body-timeout-s",
        type=float,
        metavar="S",
        help="a request body must arrive whole within S seconds, else 408 (default 10)",
    )
    srv.add_argument(
        "--request-timeout-s",
        type=float,
        metavar="S",
        help="a request not answered within S seconds gets 503 (default 30)",
    )
    srv.add_argument(
        "--max-body-reads-per-client",
        type=positive_int,
        metavar="N",
        help="requests whose bodies are still arriving that one client address may have "
        "at a replica (more: 429; default a third of the replica's 100 request slots)",
    )
    srv.add_argument(
        "--max-request-bytes",
        type=positive_int,
        metavar="N",
        help="larger request bodies are refused with 413 (default 16 MiB)",
    )
    srv.add_argument("--ray-address", metavar="ADDR", help="join this Ray cluster")
    add_allow_import(srv)
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

    from hierl.bench.options import add_arguments as add_bench_arguments

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
