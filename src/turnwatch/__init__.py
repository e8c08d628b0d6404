"""turnwatch: a user stop that preserves tool side-effect boundaries — and proof that it did."""

__version__ = "0.1.0"
