"""``python -m otherone.client.cli ...``: the ``otherone`` command."""

from otherone.client.cli import main

main()
