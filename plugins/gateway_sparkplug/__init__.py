"""Sparkplug B (Eclipse Sparkplug 3.0): the station's state as tags for SCADA, read-only.

Each scope is an edge node of ``sparkplug.group_id``; its devices are the ``Jobs`` device
(``Running/<n>`` slots and queue figures) and one device per piece of equipment. Commands stay
on CloudEvents and OPC UA. ``docs/sparkplug.md`` has the tag tree and the settings.
"""

from gateway_sparkplug.settings import SparkplugSettings

__all__ = ["SparkplugSettings"]
