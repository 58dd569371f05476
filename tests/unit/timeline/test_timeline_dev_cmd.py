"""`metakraft dev --timeline-demo` runs the timeline demo and shows the reverted state."""

from __future__ import annotations

from click.testing import CliRunner

from controller.cli.dev_cmd import dev


def test_dev_runs_timeline_demo() -> None:
    result = CliRunner().invoke(dev, ["--timeline-demo"])
    assert result.exit_code == 0, result.output
    out = result.output
    # The past, read at each epoch.
    assert "orders    3    12   12   12" in out
    assert "payments  6    6    -    -" in out
    # The revert to 20 restored that state and dropped 30.
    assert "reverted to epoch 20: audit=1 orders=12 payments=6" in out
    assert "records applied: 4" in out
    assert "live epochs: [10, 20]" in out
    assert "read at 30: no live snapshot at epoch 30" in out


def test_dev_is_registered_in_main() -> None:
    from controller.cli.main import cli

    result = CliRunner().invoke(cli, ["dev", "--timeline-demo"])
    assert result.exit_code == 0, result.output
    assert "reverted to epoch 20" in result.output
