"""hierl's test suite: a package, so its modules are imported as ``tests.<name>`` and
cannot shadow ``benchmarks/`` scripts; fake envs and helpers live in ``tests.support``."""
