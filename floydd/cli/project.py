"""``floyd init``: the project marker, and finding the project a command runs in."""

from __future__ import annotations

import json
from pathlib import Path

import click

from floydd.cli.common import handle_errors
from floydd.errors import UserError
from floydd.model import check_project

__all__ = ["init", "find_project", "MARKER", "DEFAULT_IGNORE", "job_key"]

MARKER = ".floyd"
DEFAULT_IGNORE = """\
# Left out of the code snapshot `floyd run` takes (gitignore syntax).
# Data belongs in `floyd data upload`, not in the code folder.
.git/
__pycache__/
*.pyc
.venv/
venv/
.ipynb_checkpoints/
*.egg-info/
.floyd-output/
"""


def find_project(start: Path | None = None) -> tuple[str, Path]:
    """The project name and folder containing ``start`` (walking up to the marker)."""
    here = (start or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        marker = folder / MARKER
        if marker.is_file():
            try:
                return check_project(json.loads(marker.read_text())["project"]), folder
            except (ValueError, KeyError, TypeError):
                raise UserError(f"{marker} is damaged", hint="run `floyd init NAME` here again") from None
    raise UserError(f"{here} is not inside a floyd project",
                    hint="run `floyd init NAME` in your code folder first")


def job_key(text: str) -> str:
    """``3`` means job 3 of the current project; ``digits/3`` is explicit."""
    if text.isdigit():
        return f"{find_project()[0]}/{text}"
    return text


@click.command()
@click.argument("name")
@handle_errors
def init(name: str) -> None:
    """Make the current folder the floyd project NAME.

    Writes the project marker (.floyd) and, if there is none, a default
    .floydignore listing what `floyd run` leaves out of the code snapshot.
    """
    check_project(name)
    here = Path.cwd()
    (here / MARKER).write_text(json.dumps({"project": name}) + "\n")
    ignore = here / ".floydignore"
    if not ignore.exists():
        ignore.write_text(DEFAULT_IGNORE)
    click.echo(f"project {name} initialised in {here}")
    click.echo('next: floyd run "python train.py"   (add --gpu for a GPU, --data NAME:/input for a dataset)')
