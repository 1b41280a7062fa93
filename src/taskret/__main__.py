"""``python -m taskret``: the same as the ``taskret`` command."""

from .cli.main import main

main()
