"""``floydd``'s verbs of other modules load when named (floydd.cli.floydd.LAZY_VERBS), yet
every one is there: listed by --help, found by name, the command its module makes."""

from __future__ import annotations

import click
from click.testing import CliRunner

from floydd.cli import cluster, tokens
from floydd.cli.floydd import LAZY_VERBS, cli


def test_every_lazy_verb_is_the_command_its_module_makes():
    ctx = click.Context(cli)
    assert set(LAZY_VERBS) <= set(cli.list_commands(ctx))
    assert {"start", "status", "stop", "repair"} <= set(cli.list_commands(ctx))
    for name in LAZY_VERBS:
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name, name
    assert cli.get_command(ctx, "init") is cluster.init and cli.get_command(ctx, "token") is tokens.token
    assert isinstance(cli.get_command(ctx, "audit"), click.Group) and cli.get_command(ctx, "nope") is None


def test_help_lists_them_and_a_lazy_verb_runs():
    runner = CliRunner()
    listed = runner.invoke(cli, ["--help"])
    assert listed.exit_code == 0
    assert all(f"  {name} " in listed.output for name in LAZY_VERBS), listed.output
    helped = runner.invoke(cli, ["user", "--help"])
    assert helped.exit_code == 0 and "--state-dir" in helped.output      # made with floydd's own options
