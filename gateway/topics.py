"""Every MQTT topic of the station, in one place: the MES's, the equipment's, the replies'.

The gateway, its plugins, the command line, the simulated station and the test clients build
their topics here, so what the broker's ACL must allow is known in one place too:
``broker_permissions`` lists, per broker user, every topic it publishes or subscribes to under
the default settings, and ``tests/deploy/test_mosquitto_acl.py`` holds the shipped ACL
(``deploy/mosquitto/acl``) to exactly that list, both ways.

MES topics under ``[jobs] topic_prefix`` (``jobs``)::

    <prefix>/<scope>/commands         MES -> gateway: job methods, configuration (shared)
    <prefix>/<scope>/events           gateway -> MES: status events
    <prefix>/<scope>/queue            gateway -> MES: the scope's queue (retained)
    <prefix>/metadata                 gateway -> MES: capabilities (retained)
    <prefix>/<scope>/state-index      publisher -> MES: every job, seq, epoch (retained)
    <prefix>/<scope>/order/<job>      publisher -> MES: the job order (retained)
    <prefix>/<scope>/result/<job>     publisher -> MES: the final Job Response (retained)
    <prefix>/<scope>/index/<page>     publisher -> MES: pages of the index (opt-in, retained)

Replies go to the Response Topic of the request: the MES's under ``mes/replies/``
(``MES_REPLY_PREFIX``; the command line's under ``mes/replies/cli/``, so it works as the MES's
user), a gateway instance's own under ``[mqtt] reply_topic_prefix`` (``gateway/replies``).

Equipment topics under a driver's prefix (``equipment``; the simulated station: ``simulator``)::

    <prefix>/<equipment>/commands     gateway -> equipment
    <prefix>/<equipment>/replies      equipment -> gateway (the commands' Response Topic)
    <prefix>/<equipment>/events       equipment -> gateway
    <prefix>/<equipment>/heartbeat    equipment -> gateway (liveness, and the offline Will)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

JOBS_PREFIX = "jobs"  # [jobs] topic_prefix, and the publisher's when it has none of its own
EQUIPMENT_PREFIX = "equipment"  # [mqtt_equipment] topic_prefix
SIMULATOR_PREFIX = "simulator"  # [simulator] topic_prefix
GATEWAY_REPLY_PREFIX = "gateway/replies"  # [mqtt] reply_topic_prefix: <prefix>/<instance id>
MES_REPLY_PREFIX = "mes/replies"  # where an MES asks for its replies: <prefix>/<its client id>
CLI_REPLY_PREFIX = f"{MES_REPLY_PREFIX}/cli"  # `gateway jobs ...`: the MES's user, its own level
BROKER_HEALTH_TOPIC = "$SYS/broker/uptime"  # the compose health check subscribes as the gateway

ANY = "+"  # one topic level (subscriptions, ACL rules)
REST = "#"  # every level below (subscriptions, ACL rules)
USER = "%u"  # in a mosquitto ACL pattern: the connected user's name

JobTopicKind = Literal["order", "result"]


def check_topic_level(what: str, value: str) -> str:
    """``value`` as one MQTT topic level (no ``/``, ``+``, ``#``, not empty)."""
    if not value or set(value) & {"/", "+", "#"} or "\x00" in value:
        raise ValueError(f"{what}: expected a name usable as one MQTT topic level, got {value!r}")
    return value


def check_topic_prefix(what: str, value: str) -> str:
    """``value`` as topic levels without wildcards (``a`` or ``a/b``)."""
    if not value or value.startswith("/") or value.endswith("/") or set(value) & {"+", "#"}:
        raise ValueError(f"{what}: expected topic levels without wildcards, got {value!r}")
    return value


def reply_topic(prefix: str, client_id: str) -> str:
    """The Response Topic a client asks its replies on."""
    return f"{prefix}/{client_id}"


@dataclass(frozen=True)
class MesTopics:
    """The topics an MES and the gateway share, under one prefix (``ANY`` for a filter)."""

    prefix: str = JOBS_PREFIX

    def commands(self, scope: str) -> str:
        return f"{self.prefix}/{scope}/commands"

    def events(self, scope: str) -> str:
        return f"{self.prefix}/{scope}/events"

    def queue(self, scope: str) -> str:
        return f"{self.prefix}/{scope}/queue"

    def metadata(self) -> str:
        return f"{self.prefix}/metadata"

    def state_index(self, scope: str) -> str:
        return f"{self.prefix}/{scope}/state-index"

    def index_page(self, scope: str, page: int | str) -> str:
        """A page of the opt-in paged state index (``publisher.index_pages``)."""
        return f"{self.prefix}/{scope}/index/{page}"

    def job(self, kind: JobTopicKind, scope: str, job_order_id: str) -> str:
        return f"{self.prefix}/{scope}/{kind}/{job_order_id}"

    def order(self, scope: str, job_order_id: str) -> str:
        return self.job("order", scope, job_order_id)

    def result(self, scope: str, job_order_id: str) -> str:
        return self.job("result", scope, job_order_id)


@dataclass(frozen=True)
class EquipmentTopics:
    """The topics of equipment under one prefix (the same on the gateway and equipment side)."""

    prefix: str = EQUIPMENT_PREFIX

    def replies(self, equipment: str) -> str:
        return f"{self.prefix}/{equipment}/replies"

    def commands(self, equipment: str) -> str:
        return f"{self.prefix}/{equipment}/commands"

    def events(self, equipment: str) -> str:
        return f"{self.prefix}/{equipment}/events"

    def heartbeat(self, equipment: str) -> str:
        return f"{self.prefix}/{equipment}/heartbeat"

    def sender(self, topic: str) -> str | None:
        """The equipment whose topic ``topic`` is (``<prefix>/<equipment>/...``), or ``None``."""
        head, _, rest = topic.partition(f"{self.prefix}/")
        equipment = rest.split("/", 1)[0] if not head else ""
        return equipment or None


# -- what each broker user needs -----------------------------------------------------------------


class Access(StrEnum):
    """What a user does with a topic, as a mosquitto ACL says it."""

    READ = "read"  # subscribe and receive
    WRITE = "write"  # publish


class Role(StrEnum):
    """The broker users of a station (``deploy/mosquitto/acl``)."""

    GATEWAY = "gateway"  # every gateway process: one user for all instances and roles
    MES = "mes"  # the MES, and `gateway jobs ...` / `gateway config push` run by hand
    EQUIPMENT = "equipment"  # one user per piece of equipment, named like it: ``USER`` rules


@dataclass(frozen=True, order=True)
class Permission:
    access: Access
    topic: str  # a topic filter; for ``Role.EQUIPMENT`` with ``USER`` for the user's name

    def __str__(self) -> str:
        return f"{self.access} {self.topic}"


def broker_permissions(
    *,
    jobs_prefix: str = JOBS_PREFIX,
    equipment_prefixes: Iterable[str] = (EQUIPMENT_PREFIX, SIMULATOR_PREFIX),
    gateway_reply_prefix: str = GATEWAY_REPLY_PREFIX,
    mes_reply_prefix: str = MES_REPLY_PREFIX,
) -> Mapping[Role, frozenset[Permission]]:
    """Every topic each broker user publishes (``WRITE``) or subscribes to (``READ``), as filters.

    The gateway answers the MES and publishes what the MES reads, commands equipment and reads
    what it sends; the MES sends commands and reads everything the gateway publishes for it,
    paged index included (the broker cannot know whether ``publisher.index_pages`` is on);
    equipment reads its own commands and writes its own replies, events and heartbeats only.
    """
    mes = MesTopics(jobs_prefix)
    # What the gateway publishes for the MES: status events, queue, capabilities, publisher.
    published = [
        mes.events(ANY),
        mes.queue(ANY),
        mes.metadata(),
        mes.state_index(ANY),
        mes.index_page(ANY, ANY),
        mes.order(ANY, ANY),
        mes.result(ANY, ANY),
    ]
    mes_replies = f"{mes_reply_prefix}/{REST}"
    gateway = {Permission(Access.READ, mes.commands(ANY)), Permission(Access.WRITE, mes_replies)}
    gateway |= {Permission(Access.WRITE, topic) for topic in published}
    gateway.add(Permission(Access.READ, f"{gateway_reply_prefix}/{REST}"))
    gateway.add(Permission(Access.READ, BROKER_HEALTH_TOPIC))
    the_mes = {Permission(Access.WRITE, mes.commands(ANY)), Permission(Access.READ, mes_replies)}
    the_mes |= {Permission(Access.READ, topic) for topic in published}
    equipment: set[Permission] = set()
    for prefix in equipment_prefixes:
        topics = EquipmentTopics(prefix)
        gateway.add(Permission(Access.WRITE, topics.commands(ANY)))
        equipment.add(Permission(Access.READ, topics.commands(USER)))
        for sent in (topics.replies, topics.events, topics.heartbeat):
            gateway.add(Permission(Access.READ, sent(ANY)))
            equipment.add(Permission(Access.WRITE, sent(USER)))
    return {
        Role.GATEWAY: frozenset(gateway),
        Role.MES: frozenset(the_mes),
        Role.EQUIPMENT: frozenset(equipment),
    }
