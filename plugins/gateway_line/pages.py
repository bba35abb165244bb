"""Where a line action's station job can be followed: its page on the station's web UI.

``StationPages`` answers ``gateway_command_link`` for the commands the line's driver carries
out (those naming a station): the station job's id and scope, and, when ``[line]
station_ui_urls`` gives the station's web UI, the URL of that job's page there. The station
job exists while it runs: the line Clears it once its result is recorded, so the link is live
while the action waits (afterwards the action's result holds the station's Job Response).
"""

from __future__ import annotations

from urllib.parse import quote

from gateway.equipment import CommandLink, EquipmentCommand
from gateway.hookspecs import hookimpl
from gateway_line.orders import downstream_job_id
from gateway_line.settings import LineSettings, Station


def station_job_url(base: str, scope: str, job_order_id: str) -> str:
    """A job's page on a gateway's web UI (the UI plugin's ``/ui/scopes/<scope>/jobs/<job>``,
    each part URL-quoted) under ``base``, that gateway's address (a proxy's path included)."""
    return f"{base}/ui/scopes/{quote(scope, safe='')}/jobs/{quote(job_order_id, safe='')}"


class StationPages:
    """The line's answer to ``gateway_command_link`` (registered per gateway)."""

    def __init__(self, settings: LineSettings) -> None:
        self.stations: dict[str, Station] = {
            station.equipment: station for station in settings.line()
        }
        self.ui_urls = settings.ui_urls()

    @hookimpl
    def gateway_command_link(self, command: EquipmentCommand) -> CommandLink | None:
        station = self.stations.get(command.equipment or "")
        if station is None:
            return None  # not the line's command
        try:
            job_order_id = downstream_job_id(command)
        except ValueError:  # too long an id: the driver refused to send it
            return None
        base = self.ui_urls.get(station.equipment)
        return CommandLink(
            label=f"{job_order_id} on scope {station.scope}",
            url=None if base is None else station_job_url(base, station.scope, job_order_id),
        )
