"""Renamed public names keep a deprecated alias for a minor version (the changelog says which)."""

from __future__ import annotations

import pytest

from turnwatch.integrations import wrappers
from turnwatch.integrations.agentlogs import classes


def test_integrations_calls_is_a_deprecated_alias_of_wrappers() -> None:
    from turnwatch.integrations import calls

    with pytest.warns(DeprecationWarning, match=r"integrations\.wrappers\.run_command"):
        assert calls.run_command is wrappers.run_command
    with pytest.warns(DeprecationWarning, match=r"integrations\.wrappers\.declared_class"):
        assert calls.class_of is wrappers.declared_class


def test_class_for_is_a_deprecated_alias_of_cli_tool_class() -> None:
    with pytest.warns(DeprecationWarning, match="cli_tool_class"):
        assert classes.class_for is classes.cli_tool_class


def test_the_writers_tunables_are_deprecated_aliases_in_tracing_ledger() -> None:
    from turnwatch.tracing import ledger, ledger_writer

    with pytest.warns(DeprecationWarning, match=r"tracing\.ledger_writer\.LINGER_S"):
        assert ledger.LINGER_S == ledger_writer.LINGER_S
    with pytest.raises(AttributeError, match="NOT_A_NAME"):
        ledger.NOT_A_NAME  # noqa: B018 - the lookup is the test


def test_write_batch_is_a_deprecated_alias_in_ledger_file() -> None:
    from turnwatch.tracing import ledger, ledger_batch, ledger_file

    assert ledger.write_batch is ledger_batch.write_batch  # its public home, no warning
    with pytest.warns(DeprecationWarning, match=r"tracing\.ledger_batch\.write_batch"):
        assert ledger_file.write_batch is ledger_batch.write_batch
    with pytest.raises(AttributeError, match="NOT_A_NAME"):
        ledger_file.NOT_A_NAME  # noqa: B018
