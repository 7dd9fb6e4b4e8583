"""``python -m ragengine.cli``: the ``ragengine`` command."""

from ragengine.cli import main

main()
