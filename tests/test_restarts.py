"""RestartBudget: counting, the two checks and their messages, state."""

from __future__ import annotations

import pytest

from hierl.evaluators.restarts import RestartBudget


class BudgetError(RuntimeError):
    pass


def test_budget_counts_then_raises_its_error_with_the_last_error_chained():
    budget = RestartBudget(2, "max_widget_restarts", BudgetError)
    cause = ValueError("boom")
    for key in ("a", "b"):
        budget.check("widget a", cause)  # a recreation is left
        budget.record(key)
    assert budget.made == 2 and budget.counts == {"a": 1, "b": 1}
    with pytest.raises(BudgetError) as info:
        budget.check("widget a", cause, detail=", 1 of widget a")
    assert str(info.value) == (
        "widget a failed after max_widget_restarts=2 recreations (2 made, 1 of widget a); "
        "the last error: boom"
    )
    assert info.value.__cause__ is cause
    with pytest.raises(BudgetError, match=r"the last error: ValueError: boom$"):
        budget.check("widget a", cause, last_error="ValueError: boom")


def test_zero_budget_and_negative_limit():
    with pytest.raises(BudgetError, match=r"\(0 made\)"):
        RestartBudget(0, "max_widget_restarts", BudgetError).check("widget 1", None)
    with pytest.raises(ValueError, match="max_widget_restarts must be >= 0, got -1"):
        RestartBudget(-1, "max_widget_restarts")


def test_a_constructor_failure_is_not_recreatable():
    budget = RestartBudget(5, "max_widget_restarts", BudgetError)
    budget.check_recreatable("widget 1", RuntimeError("died"))  # an ordinary failure
    failed_init = RuntimeError("no env")
    failed_init.actor_init_failed = True  # as Ray's RayActorError says it
    with pytest.raises(BudgetError, match=r"^widget 1 could not be created .*: no env$"):
        budget.check_recreatable("widget 1", failed_init)


def test_state_roundtrip_keeps_the_count():
    budget = RestartBudget(3, "max_widget_restarts", BudgetError)
    budget.record(0)
    resumed = RestartBudget(3, "max_widget_restarts", BudgetError)
    resumed.set_state(budget.get_state())
    assert resumed.made == 1
    resumed.record(1)
    resumed.record(1)
    with pytest.raises(BudgetError, match=r"\(3 made\)"):
        resumed.check("widget 1", None)
