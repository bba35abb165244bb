"""The recipe runtime: every recipe format runs on it.

A format supplies a compiler and a pure executor (``gateway.formats``) and registers with the
``gateway_register_recipe_formats`` hook; the runtime does the rest, shared by every gateway
instance through Redis: the execution state and its compare-and-swap, run numbering, durable
timers, the outbox and resends, routing by type, reconciliation after a crash, the MES's
commands, reports to job management, equipment events, progress for the web UI and the
``gateway recipe`` command. Its public API for formats and their tests:

- ``dump_execution`` / ``load_execution``: the stored form of ``gateway.formats.Execution``;
- ``take_done``: what the runtime moves out of the state into the job's history on a commit.

``gateway.testing.formats`` holds the contract suite a format's tests run.
"""

from gateway_runtime.state import dump_execution, load_execution, take_done

__all__ = ["dump_execution", "load_execution", "take_done"]
