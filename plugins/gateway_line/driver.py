"""The line's equipment driver: a downstream station is equipment whose commands are jobs.

A ``push_command`` action naming a station (``[line] stations``) is sent as a StoreAndStart of
a job order on the station's scope (``orders.job_order``); ``send`` returns once the station
has stored it, and the action's reply comes later, when the station's job ends
(``follower``). A command sent again (a crash, a redelivery, equipment back online) carries the
same correlation id, hence the same job order id: the station refuses to store it twice
(``duplicate``), and the line follows the job already there instead of starting a second one.
A new try (the last one timed out) is a new job; the earlier try's job, if it still runs, is
aborted.
"""

from __future__ import annotations

import logging

from gateway.equipment import EquipmentCommand
from gateway.errors import GatewayError
from gateway_line.link import StationLink
from gateway_line.orders import downstream_job_id, is_final, job_order, upstream_of

log = logging.getLogger(__name__)

STORED = "AllowedToStart"  # what the line knows of a job the station just stored


class LineDriver:
    """Serves the equipment named in ``[line] stations``, by name."""

    def __init__(self, link: StationLink, name: str = "line") -> None:
        self.name = name
        self.link = link

    def serves(self, command: EquipmentCommand) -> bool:
        return command.equipment in self.link.stations

    async def send(self, command: EquipmentCommand) -> None:
        station = command.equipment
        assert station is not None  # ``serves`` took only commands naming a station
        try:
            order = job_order(command)
        except ValueError as error:
            raise GatewayError(f"station {station}: {error}") from None
        job_order_id = downstream_job_id(command)
        answer = await self.link.call(station, "StoreAndStart", {"JobOrder": order})
        if answer.duplicate:
            log.info(
                "station %s holds job %s already (the command was sent again): following it",
                station,
                job_order_id,
            )
        elif not answer.ok:
            raise GatewayError(
                f"station {station} refused job {job_order_id} (ReturnStatus {answer.status}): "
                f"{answer.message or 'no reason given'}"
            )
        else:
            log.info("station %s runs job %s", station, job_order_id)
        if job_order_id not in self.link.jobs[station]:
            self.link.heard(station, job_order_id, STORED)
        await self._abort_earlier_tries(command)

    async def _abort_earlier_tries(self, command: EquipmentCommand) -> None:
        """A new try of an action (the last one timed out): the station jobs of its earlier
        tries, still running, are aborted, so one action has one station job at work."""
        this = upstream_of(downstream_job_id(command))
        assert this is not None  # the line's own id
        for station, job_order_id, state in self.link.jobs_of(command.scope, command.job_order_id):
            earlier = upstream_of(job_order_id)
            if (
                earlier is None
                or earlier.correlation.step != this.correlation.step
                or earlier.correlation.attempt >= this.correlation.attempt
                or is_final(state.split("."))
            ):
                continue
            try:
                answer = await self.link.call(station, "Abort", {"JobOrderID": job_order_id})
            except GatewayError as error:  # the new try goes on; reconciliation cannot help here
                log.warning(
                    "station %s: earlier try %s not aborted: %s", station, job_order_id, error
                )
                continue
            log.info(
                "station %s: job %s of an earlier try aborted (ReturnStatus %d)",
                station,
                job_order_id,
                answer.status,
            )
