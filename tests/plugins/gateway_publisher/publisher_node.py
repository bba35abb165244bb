"""One publisher process of the kill test (not a test module: ``test_kill.py`` starts it).

``gateway run --role publisher`` from the ``GATEWAY_...`` environment, with the publisher
plugin given a document source for records without documents (the same
``RepositoryDocuments`` as the fixtures': a script cannot import a test module).
"""

from __future__ import annotations

from typing import Any

import anyio

from gateway.app import Gateway
from gateway.logs import configure_logging
from gateway.store import Store
from gateway_jobs.model import to_json
from gateway_jobs.repository import JobRepository
from gateway_publisher.plugin import PublisherPlugin


class RepositoryDocuments:
    def __init__(self, store: Store) -> None:
        self.repository = JobRepository(store)

    async def job_order(self, scope: str, job_order_id: str) -> Any:
        job = await self.repository.load(scope, job_order_id)
        return None if job is None else to_json(job.job_order)

    async def job_response(self, scope: str, job_order_id: str) -> Any:
        job = await self.repository.load(scope, job_order_id)
        return None if job is None else to_json(job.response)


def main() -> None:
    plugin = PublisherPlugin(documents=RepositoryDocuments)
    gateway = Gateway.from_environment(None, extra_plugins={"publisher-test": plugin})
    configure_logging(gateway.settings)

    async def run() -> None:
        await gateway.run(handle_signals=True)

    anyio.run(run)


if __name__ == "__main__":
    main()
