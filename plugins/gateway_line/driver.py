"""The line's equipment driver: a downstream station is equipment whose commands are jobs.

A ``push_command`` action naming a station (``[line] stations``) is sent as a StoreAndStart of
a job order on the station's scope (``orders.job_order``); ``send`` returns once the station
has stored it, and the action's reply comes later, when the station's job ends
(``follower``). A command sent again (a crash, a redelivery, equipment back online) carries the
same correlation id, hence the same job order id: the station refuses to store it twice
(``duplicate``), and the line follows the job already there instead of starting a second one.
"""

from __future__ import annotations

import logging

from gateway.equipment import EquipmentCommand
from gateway.errors import GatewayError
from gateway_line.link import StationLink
from gateway_line.orders import downstream_job_id, job_order

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
