"""``python -m turnwatch``."""

from turnwatch.cli.app import main

main()
