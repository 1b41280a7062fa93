"""``taskret data ...``: list the datasets of the built-in tasks, installed or not in the folder every other command
reads them from (:func:`taskret.data.default_data_dir`), and download them from their publishers into the download
folder (``$TASKRET_DATA_DIR``, else ``~/.cache/taskret/data``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..data import default_data_dir
from ..download import DATASETS, DownloadError, download, is_installed
from .common import App

app = App(help="Datasets of the built-in tasks: list them, download them from their publishers.")
console = Console(stderr=True, soft_wrap=True)  # as taskret.cli.common.console

DATA_DIR_HELP = "where datasets go (default $TASKRET_DATA_DIR, else ~/.cache/taskret/data)"
LIST_DIR_HELP = ("where datasets are read from (default: where every command reads them: $TASKRET_DATA_DIR, else "
                 "../shared/data when it exists, else ~/.cache/taskret/data)")


@app.command("list")
def list_datasets(data_dir: Optional[Path] = typer.Option(None, help=LIST_DIR_HELP)):
    """Every downloadable dataset: what it is, its size, licence, source, and whether it is installed in the folder
    the tasks are read from (the table's title names it)."""
    folder = data_dir or default_data_dir()
    table = Table(title=f"datasets ({folder})")
    for column in ("name", "what", "size", "licence", "source", "installed"):
        table.add_column(column, overflow="fold")
    for dataset in DATASETS.values():
        table.add_row(dataset.name, escape(dataset.what), dataset.size, dataset.licence,
                      escape("\n".join(s.url for s in dataset.sources)),
                      "yes" if is_installed(dataset, folder) else "no")
    Console(width=max(Console().width, 160)).print(table)


@app.command("download")
def download_command(
    name: str = typer.Argument(..., help=f"a dataset ({', '.join(DATASETS)}) or 'all'"),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_DIR_HELP),
    force: bool = typer.Option(False, "--force", help="fetch and convert again even when already installed"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="show download progress"),
):
    """Download a dataset (or all of them), check its checksum and lay it out for the built-in tasks."""
    if name != "all" and name not in DATASETS:
        console.print(f"[bold red]error:[/] unknown dataset '{escape(name)}'; datasets: {', '.join(DATASETS)}, all")
        raise typer.Exit(2)
    names = list(DATASETS) if name == "all" else [name]
    failed = []
    for dataset in names:
        try:
            folder = download(dataset, data_dir, progress=progress, force=force)
        except DownloadError as err:
            # 'all' goes on with the other datasets: one unreachable host should not block the rest.
            console.print(f"[bold red]error:[/] {dataset}: {escape(str(err))}")
            failed.append(dataset)
            continue
        console.print(f"{dataset}: {escape(str(folder))} ({DATASETS[dataset].licence})")
    if failed:
        raise typer.Exit(2)
