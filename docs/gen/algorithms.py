"""The algorithm pages (``algorithms/``): one per registered trainer, and the index."""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any

from .configs import config_table
from .markdown import docstring, paper, slug, table
from .paths import ROOT
from .records import Record, record_markdown
from .tuned import tuned_comment, tuned_files


def algorithm_names() -> list[str]:
    """The registered algorithms (the registry's names, as ``hierl list`` shows them)."""
    from hierl.algorithms.registry import trainer_names

    return trainer_names()


def trainer(name: str) -> type:
    """The trainer class of algorithm ``name``."""
    from hierl.algorithms.registry import get_trainer_class

    return get_trainer_class(name)


@functools.cache
def strategies_of(name: str) -> tuple[str | None, list[str]]:
    """``(default, supported)`` policy optimizers of algorithm ``name``: what ``hierl
    list`` and ``hierl config`` show (``None``: a nested trainer that drives whole
    trainers)."""
    config_class = trainer(name).config_class
    default = getattr(config_class, "default_optimizer", None) or None
    choices = getattr(config_class, "optimizer_choices", None)
    return default, list(choices()) if choices and default else []


ACTION_SPACES = ("Discrete", "MultiDiscrete", "Box")
OBSERVATION_SPACES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple")


def _space(kind: str) -> Any:
    import gymnasium as gym
    import numpy as np

    box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    return {
        "Box": box,
        "Discrete": gym.spaces.Discrete(3),
        "MultiDiscrete": gym.spaces.MultiDiscrete([2, 3]),
        "MultiBinary": gym.spaces.MultiBinary(3),
        "Dict": gym.spaces.Dict({"a": box, "b": gym.spaces.Discrete(2)}),
        "Tuple": gym.spaces.Tuple((box, gym.spaces.Discrete(2))),
    }[kind]


def policy_of(name: str) -> tuple[type | None, type]:
    """The policy class of algorithm ``name`` (a population's: its members') and the
    config class it is built with; ``None`` when it has no single policy class."""
    cls = trainer(name)
    cls = getattr(cls, "member_class", None) or cls
    return getattr(cls, "policy_class", None), cls.config_class


@functools.cache
def supported_spaces(name: str) -> tuple[list[str], list[str]] | None:
    """The action and observation space kinds whose policy algorithm ``name``'s policy
    class builds (tried on each kind: the policy's own checks decide); ``None`` when the
    algorithm has no policy class to try (ALPHAZERO: board games)."""
    policy_class, config_class = policy_of(name)
    if policy_class is None:
        return None
    import torch

    config = config_class.from_dict({})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: threads only contend (the docs build is serial)

    def builds(observation: str, action: str) -> bool:
        try:
            policy_class(_space(observation), _space(action), config)
        except (ValueError, TypeError, NotImplementedError):
            return False
        return True

    try:
        actions = [a for a in ACTION_SPACES if builds("Box", a)]
        observations = [o for o in OBSERVATION_SPACES if actions and builds(o, actions[0])]
    finally:
        torch.set_num_threads(threads)
    return actions, observations


def spaces_text(name: str, spaces: tuple[list[str], list[str]] | None) -> tuple[str, str]:
    """The action and observation cells of algorithm ``name`` (one without a policy
    class to try is ALPHAZERO: the board-game envs of ``hierl.algorithms.alphazero``)."""
    if spaces is None:
        games = importlib.import_module("hierl.algorithms.alphazero.games")
        ids = sorted(v for k, v in vars(games).items() if k.endswith("_ID"))
        envs = ", ".join(f"`{i}`" for i in ids)
        return "Discrete (board moves)", f"two-player board games ({envs}: `BoardGameEnv`)"
    return ", ".join(spaces[0]) or "none", ", ".join(spaces[1]) or "none"


def algorithm_page(name: str, all_records: list[Record]) -> str:
    """The page of algorithm ``name``."""
    from hierl.algorithms.registry import describe

    cls = trainer(name)
    module = sys.modules[cls.__module__]
    config_class = cls.config_class
    default, supported = strategies_of(name)
    spaces = supported_spaces(name)
    actions, observations = spaces_text(name, spaces)
    out = [
        f"# {name}\n",
        f"{describe(name)}.\n",
        f"`from hierl import {cls.__name__}` ([API](../reference/api/hierl.md#"
        f"{cls.__module__}.{cls.__name__})); config class `{config_class.__name__}`; "
        f"on the command line: `hierl train --algo {name}`, `hierl config {name}`.\n",
        "## What it is\n",
        docstring(module) + "\n",
    ]
    if docstring(cls):
        out += [f"`{cls.__name__}`: " + docstring(cls) + "\n"]
    out += [
        "## Can I use it?\n",
        table(
            ["", "supported"],
            [["action spaces", actions], ["observation spaces", observations]],
        ),
    ]
    if spaces is not None:
        out.append(
            "Generated by building the algorithm's policy class "
            f"(`{policy_of(name)[0].__name__}`) on each kind of space: the policy's own "
            "checks decide.\n"
        )
    out.append("## Strategies\n")
    if default:
        links = ", ".join(f"[`{s}`](../strategies/{slug(s)}.md)" for s in supported)
        out.append(
            f"Runs on {links}; `{default}` unless the config's `optimizer` names another "
            "(see [choosing a strategy](../guide/strategies.md)).\n"
        )
    else:
        out.append(
            "A nested trainer: it drives whole trainers (or its own actors) from its "
            "`train()`, not one policy optimizer (see [nesting](../guide/nesting.md)).\n"
        )
        member = getattr(cls, "member_class", None)
        members = [n for n in algorithm_names() if member is not None and trainer(n) is member]
        if members:
            out.append(
                f"Its members are `{member.__name__}` trainers, each on its own strategy; "
                f"their settings are [{members[0]}'s]({slug(members[0])}.md).\n"
            )
    out += [
        "## Configuration\n",
        f"The fields of `{config_class.__name__}`, as `hierl config {name}` prints them; "
        f"set them with `--config`, `--set KEY=VALUE` or `{cls.__name__}({{...}})`.\n",
        config_table(config_class),
    ]
    if default:
        opt_config = config_class.from_dict({}).optimizer_config
        out += [
            f"### Settings of the `{default}` strategy\n",
            f"`optimizer_config` of the default strategy (`{type(opt_config).__name__}`), "
            "also accepted as flat keys; another strategy's settings are on "
            "its page.\n",
            config_table(type(opt_config)),
        ]
    tuned = tuned_files(name)
    out.append("## Tuned examples\n")
    if tuned:
        rows = [
            [
                f"`{p.relative_to(ROOT).as_posix()}`",
                spec.get("env", "-"),
                tuned_comment(p),
            ]
            for p, spec in tuned
        ]
        out += [
            table(["file", "env", "what it runs"], rows),
            "Run one with `hierl train --config FILE`.\n",
        ]
    else:
        out.append(f"No file of `examples/tuned/` runs {name}.\n")
    mine = [r for r in all_records if r.algorithm == name]
    out.append("## Published results\n")
    if mine:
        out.append(
            "From `benchmarks/RESULTS.md` and `benchmarks/curves/` (all records: "
            "[benchmark results](../benchmarks/results.md)).\n"
        )
        out += [record_markdown(r, f"algorithms/{slug(name)}.md") for r in mine]
    else:
        out.append(f"None published yet for {name} (see [benchmarks](../benchmarks/index.md)).\n")
    return "\n".join(out)


def algorithms_index(names: list[str], all_records: list[Record]) -> str:
    """The algorithms overview table."""
    from hierl.algorithms.registry import describe

    rows = []
    for name in names:
        cls = trainer(name)
        text = docstring(cls) + "\n" + docstring(sys.modules[cls.__module__])
        actions, observations = spaces_text(name, supported_spaces(name))
        default, supported = strategies_of(name)
        strategies = ", ".join(f"**{s}**" if s == default else s for s in supported) or "nested"
        tuned = ", ".join(p.stem for p, _ in tuned_files(name)) or "-"
        published = sum(r.algorithm == name for r in all_records)
        rows.append(
            [
                f"[{name}]({slug(name)}.md)",
                describe(name),
                paper(text, name) or "-",
                actions,
                observations,
                strategies,
                tuned,
                published or "-",
            ]
        )
    header = [
        "algorithm",
        "what it is",
        "paper",
        "action spaces",
        "observation spaces",
        "strategies (**default**)",
        "tuned files",
        "published results",
    ]
    return (
        "# Algorithms\n\n"
        "Every registered algorithm (`hierl list`), generated from the registry, the "
        "trainers' docstrings and config classes, `examples/tuned/` and the benchmark "
        "records. Each page has the algorithm's full config table.\n\n" + table(header, rows)
    )
