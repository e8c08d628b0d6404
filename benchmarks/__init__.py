"""Benchmarks: ``make bench`` (``python -m benchmarks``). Ratios measured side by side, one run."""
