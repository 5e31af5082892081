"""The YAML reader of every hierl file format (``hierl train --config``, ``hierl tune``).

PyYAML implements YAML 1.1, whose floats need a dot and a signed exponent (``1.0e-3``):
``1e-3`` or ``1E5`` would be read as *strings*, so ``lr: 1e-3`` would fail config checks
with "must be a number".  ``YAMLLoader`` reads them as floats, as YAML 1.2, JSON and
Python do; everything else is PyYAML's ``SafeLoader`` (no Python objects are built).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

FLOAT_WITH_EXPONENT = re.compile(
    r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"
)
"""Floats with an exponent in the YAML 1.2 / Python form: ``1e-3``, ``1E5``, ``2.5e+3``,
``.5e1`` (YAML 1.1's own resolver already reads ``.5``, ``1.0`` and ``1.0e-3``)."""


class YAMLLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also reads ``1e-3``-style numbers as floats."""


YAMLLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", FLOAT_WITH_EXPONENT, list("-+0123456789.")
)


def load_yaml(text: str) -> Any:
    """Parse one YAML document with ``YAMLLoader``; raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=YAMLLoader)  # a SafeLoader: builds no objects
