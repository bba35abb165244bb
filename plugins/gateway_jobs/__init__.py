"""OPC 40001-3 job management for the MES: job orders, their state machine, station configuration.

Modules, one concern each: ``model`` (ISA-95 types and their JSON), ``states`` (the state
machine), ``repository`` (documents, indexes, compare-and-swap), ``config`` (station
configuration), ``acceptance`` (may a scope take a job), ``events`` (status events, metadata),
``jobs`` (the methods, end to end), ``control`` (``JobControl`` for recipe interpreters),
``processor`` (the MES's CloudEvents), ``plugin`` (the hooks).
"""

from gateway_jobs.settings import JobsSettings

__all__ = ["JobsSettings"]
