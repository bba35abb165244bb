"""Where job management runs (``gateway run --role ...``).

``gateway`` runs job management with the engine; ``jobs`` runs job management alone, so the
MES's calls are answered by a process of their own while engine processes (``engine``) run the
recipes. Whatever changes jobs (the dispatcher, status events, the queue feed) runs in all three.
"""

from __future__ import annotations

MES_ROLES = frozenset({"gateway", "jobs"})  # the MES's calls and the metadata
JOB_CHANGING_ROLES = frozenset({"gateway", "engine", "jobs"})
