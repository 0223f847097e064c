"""``floyd``: the user's command line (FloydHub's verbs), thin over :mod:`floydd.client`."""

from __future__ import annotations

import click

import floydd
from floydd.cli import data, exchange, exits, jobs, login, nodes, project, run, top

__all__ = ["main", "cli"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=exits.HELP)
@click.version_option(floydd.__version__, prog_name="floyd")
def cli() -> None:
    """Run, track and compare experiments on your lab's own GPU boxes.

    \b
    floyd init NAME                       make this folder a project
    floyd data upload PATH --name NAME    store a dataset version
    floyd run --gpu --data NAME:/input "python train.py"
    floyd status / logs -f / compare      watch and compare runs
    floyd top                             the whole cluster in a terminal UI

    \b
    floyd login HOST                      use the lab from a laptop (TLS, personal token)

    Talks to the box you logged in to (floyd login), else the local floydd daemon (started
    in the background when none runs).
    """


cli.add_command(project.init)
cli.add_command(run.run)
cli.add_command(run.restart)
for command in (jobs.status, jobs.info, jobs.logs, jobs.stop, jobs.output, jobs.clone, jobs.delete,
                jobs.compare):
    cli.add_command(command)
cli.add_command(data.data)
cli.add_command(nodes.nodes)
cli.add_command(top.top)
for command in (login.login, login.logout, login.whoami, login.token):
    cli.add_command(command)
cli.add_command(exchange.export)
cli.add_command(exchange.import_)


def main() -> None:
    cli(prog_name="floyd")


if __name__ == "__main__":
    main()
