"""What tests share besides fixtures: fake envs, the learning-test loop and configs,
README block reading, small helpers.  Tests import from here, never from ``conftest``
(which keeps only fixtures and the Ray setup)."""
