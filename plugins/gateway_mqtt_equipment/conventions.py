"""How equipment talks MQTT with the gateway: topics, CloudEvent types and attributes.

Everything is a CloudEvent in MQTT v5 binary mode (``gateway.codecs.mqtt``), shaped as every
equipment driver's CloudEvents are (``gateway.equipment.command_event``, ``reply_from_event``,
``event_from_cloudevent``). With ``<prefix>`` the driver's topic prefix and ``<equipment>`` the
equipment name used in recipes:

- ``<prefix>/<equipment>/commands`` (gateway -> equipment, QoS 1): one ``push_command``.
  Type = the action's ``type_id``; ``subject`` = the job's scope; ``correlationid`` (also the
  Correlation Data) = ``{job}:{action}:{attempt}``; Response Topic =
  ``<prefix>/<equipment>/replies``; Message Expiry = the action's timeout; extension attributes
  ``equipment``, ``joborderid``, ``action``; data = what the driver's ``payload_for`` makes of
  the command.
- ``<prefix>/<equipment>/replies`` (equipment -> gateway, QoS 1): the answer, sent to the
  command's Response Topic with its Correlation Data (``correlationid``). A failed command is
  answered with the ``errorcode`` and ``errormessage`` attributes set. Every gateway instance
  subscribes through a shared subscription, so the reply is handled even if the instance that
  sent the command died.
- ``<prefix>/<equipment>/events`` (equipment -> gateway, QoS 1): what the equipment reports on its
  own, for ``pull_event`` actions. Type = the action's ``type_id``; ``subject`` = the scope and
  ``joborderid`` = the job when the equipment knows them; ``equipment`` = its name.
- ``<prefix>/<equipment>/heartbeat`` (equipment -> gateway, QoS 0): ``HEARTBEAT_TYPE`` every few
  seconds while the equipment is up, ``OFFLINE_TYPE`` (QoS 1) when it goes away, with data
  ``{"reason": "..."}`` if it wants to say why. The offline event also makes a good MQTT Will,
  so a device whose connection breaks is noticed at once.

**Identity.** The ``<equipment>`` level of the topic a reply, event or heartbeat arrives on says
who sent it: the broker's ACL lets each equipment user publish only under its own name
(``deploy/mosquitto/acl``: ``pattern write <prefix>/%u/...``). The gateway takes the equipment
from the topic, refuses an event or heartbeat whose ``equipment`` attribute names other
equipment, and accepts a reply only for a command it sent to that equipment (``not-permitted``
otherwise; ``gateway.equipment.EquipmentHub.reply``).
"""

from __future__ import annotations

from gateway.equipment import ACTION_ATTRIBUTE, EQUIPMENT_ATTRIBUTE, JOB_ORDER_ATTRIBUTE

# The topics live with every other topic of the station (``gateway.topics``); this plugin has
# always exported them.
from gateway.topics import EquipmentTopics, check_topic_level, check_topic_prefix

HEARTBEAT_TYPE = "io.github.station-gateway.equipment.heartbeat.v1"
OFFLINE_TYPE = "io.github.station-gateway.equipment.offline.v1"

# CloudEvent extension attributes of equipment messages: the host's (``gateway.equipment``),
# under the names this plugin has always exported.
EQUIPMENT = EQUIPMENT_ATTRIBUTE  # the equipment's name (events, heartbeats, commands)
JOB_ORDER = JOB_ORDER_ATTRIBUTE  # the job a command, reply or event belongs to
ACTION = ACTION_ATTRIBUTE  # the recipe action a command carries out

WILDCARD = "*"

__all__ = [
    "ACTION",
    "EQUIPMENT",
    "HEARTBEAT_TYPE",
    "JOB_ORDER",
    "OFFLINE_TYPE",
    "WILDCARD",
    "EquipmentTopics",
    "check_topic_level",
    "check_topic_prefix",
]
