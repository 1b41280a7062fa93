"""``python -m taskret.cli``: the same as the ``taskret`` command."""

from .main import main

main()
