"""A line of stations: recipe actions that run jobs on downstream gateways, as their MES.

See ``docs/line.md``. ``LineSettings`` is the ``[line]`` section; ``downstream_job_id`` and
``upstream_of`` spell and read the station job order ids the line uses.
"""

from gateway_line.orders import Upstream, downstream_job_id, job_order, outcome, upstream_of
from gateway_line.settings import LineSettings, Station

__all__ = [
    "LineSettings",
    "Station",
    "Upstream",
    "downstream_job_id",
    "job_order",
    "outcome",
    "upstream_of",
]
