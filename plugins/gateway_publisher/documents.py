"""Where the order and result payloads come from when a change record does not carry them.

The job management plugin's change records carry the documents (``gateway.changes``), so the
publisher reads nothing. For records without them (written by another job management plugin, say), a
``DocumentSource`` handed in from outside can read them; the publisher imports nothing of the
job management plugin. Without either, the order and result topics are not published and the
index says ``has_result: false``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Protocol

from gateway.changes import ChangeRecord
from gateway.store import Store

log = logging.getLogger(__name__)


class DocumentSource(Protocol):
    """Reads a job's current documents (OPC UA JSON); ``None`` when the job is gone."""

    async def job_order(self, scope: str, job_order_id: str) -> Any: ...

    async def job_response(self, scope: str, job_order_id: str) -> Any: ...


DocumentSourceFactory = Callable[[Store], DocumentSource]


class Payloads:
    """The bytes of a job's order and result topics: from the record, else from the source."""

    def __init__(self, source: DocumentSource | None) -> None:
        self.source = source
        self._warned = False

    async def order(self, scope: str, record: ChangeRecord) -> bytes | None:
        if record.job_order is not None:
            return record.job_order.encode()
        if self.source is None:
            self._missing("job_order")
            return None
        return _encode(await self.source.job_order(scope, record.job_order_id))

    async def result(self, scope: str, record: ChangeRecord) -> bytes | None:
        if record.job_response is not None:
            return record.job_response.encode()
        if self.source is None:
            self._missing("job_response")
            return None
        return _encode(await self.source.job_response(scope, record.job_order_id))

    def _missing(self, field: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "change records carry no %s and no document source is configured: "
                "order and result topics are not published",
                field,
            )


def _encode(document: Any) -> bytes | None:
    if document is None:
        return None
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
