"""``python -m turnwatch``."""

from turnwatch.cli.entry import main

main()
