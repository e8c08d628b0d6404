"""The ADR's stop for the agent frameworks people already run, one module per framework.

Each module imports its framework and nothing else does; each is behind an optional extra
(``pip install 'turnwatch[pydantic-ai]'``).
"""
