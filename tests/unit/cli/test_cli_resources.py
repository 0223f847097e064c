"""``--gpu [N]``, ``--cpu [N]`` and ``--memory SIZE`` as ``floyd run`` and ``floyd restart`` read
them: FloydHub's flags keep their meaning alone and take a number too."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from floydd.cli.resources import OptionalCounts, resource_fields
from floydd.errors import InvalidSpec


@click.command(cls=OptionalCounts, context_settings={"allow_interspersed_args": False})
@click.option("--gpu", type=int, default=None)
@click.option("--cpu", default=None)
@click.option("--memory", default=None)
@click.option("--nodes", type=int, default=1)
@click.argument("command", nargs=-1)
def fake_run(gpu, cpu, memory, nodes, command):
    click.echo(repr((resource_fields(gpu, cpu, memory, nodes), " ".join(command))))


@pytest.mark.parametrize("args, fields, command", [
    (["python", "a.py"], {"gpus": 0, "nodes": 1}, "python a.py"),
    (["--cpu", "python", "a.py"], {"gpus": 0, "nodes": 1}, "python a.py"),
    (["--cpu", "--memory", "2G", "train"], {"gpus": 0, "memory": 2 << 30, "nodes": 1}, "train"),
    (["--cpu", "4", "train"], {"cpus": 4.0, "gpus": 0, "nodes": 1}, "train"),
    (["--cpu=0.5", "train"], {"cpus": 0.5, "gpus": 0, "nodes": 1}, "train"),
    (["--gpu", "--cpu", "8", "train"], {"cpus": 8.0, "gpus": 1, "nodes": 1}, "train"),
    (["--gpu", "2", "--cpu", ".25", "--nodes", "2", "x"], {"cpus": 0.25, "gpus": 2, "nodes": 2}, "x"),
    (["--cpu", "--", "4"], {"gpus": 0, "nodes": 1}, "4"),                # a command that is a number
])
def test_the_flags_alone_and_with_a_number(args, fields, command):
    out = CliRunner().invoke(fake_run, args)
    assert out.exit_code == 0, out.output
    assert out.output.strip() == repr((fields, command))


@pytest.mark.parametrize("gpu, cpu, memory, said", [
    (1, "alone", None, "exclude each other"), (0, None, None, "at least one GPU"),
    (None, "lots", None, "not a number of cores"), (None, "5000", None, "--cpu"),
    (None, "0.0001", None, "steps of 0.001"), (None, None, "16", "no unit"), (None, None, "big", "not a size"),
])
def test_what_cannot_be_asked_is_refused_before_anything_is_sent(gpu, cpu, memory, said):
    with pytest.raises(InvalidSpec, match=said) as err:
        resource_fields(gpu, cpu, memory, 1)
    assert err.value.hint


def test_a_restart_sends_only_what_changes():
    assert resource_fields(None, None, None, None, restart=True) == {}
    assert resource_fields(None, "alone", "1G", None, restart=True) == {"gpus": 0, "memory": 1 << 30}
    assert resource_fields(2, "3", None, 2, restart=True) == {"cpus": 3.0, "gpus": 2, "nodes": 2}
