"""The shipped broker ACL allows each user exactly the topics the code uses, no more, no less.

The list is generated from ``gateway.topics.broker_permissions`` (the one place topics come
from) and held against ``deploy/mosquitto/acl`` both ways; the subscriptions of a gateway built
with every default plugin are held against the list, so a topic the code subscribes to that
``gateway.topics`` does not know fails here too. ``test_mosquitto_acl.py`` runs the same file in
a real mosquitto.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from gateway.app import Gateway
from gateway.topics import (
    ANY,
    REST,
    USER,
    Access,
    EquipmentTopics,
    MesTopics,
    Permission,
    Role,
    broker_permissions,
)

ACL = Path(__file__).resolve().parents[2] / "deploy" / "mosquitto" / "acl"


class AclError(ValueError):
    pass


def parse_acl(text: str) -> tuple[dict[str, set[Permission]], set[Permission]]:
    """Mosquitto's acl_file: ``user`` blocks of ``topic`` rules, and ``pattern`` rules, which
    apply to every user (with ``%u`` the user's name)."""
    users: dict[str, set[Permission]] = {}
    patterns: set[Permission] = set()
    user: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        words = raw.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "user" and len(words) == 2:
            user = words[1]
            users.setdefault(user, set())
            continue
        if words[0] not in ("topic", "pattern") or len(words) not in (2, 3):
            raise AclError(f"line {number}: not understood: {raw!r}")
        access, topic = ("readwrite", words[1]) if len(words) == 2 else (words[1], words[2])
        if access not in ("read", "write", "readwrite"):
            raise AclError(f"line {number}: access {access!r} (deny rules are not used)")
        accesses = (Access.READ, Access.WRITE) if access == "readwrite" else (Access(access),)
        rules = {Permission(kind, topic) for kind in accesses}
        if words[0] == "pattern":
            patterns |= rules
        elif user is None:
            raise AclError(f"line {number}: a topic rule before any user applies to anonymous")
        else:
            users[user] |= rules
    return users, patterns


def covers(rule: str, wanted: str) -> bool:
    """Whether every topic ``wanted`` (a filter) matches is one ``rule`` (a filter) allows."""
    rule_levels, wanted_levels = rule.split("/"), wanted.split("/")
    for position, level in enumerate(rule_levels):
        if level == REST:
            return True
        if position >= len(wanted_levels):
            return False
        asked = wanted_levels[position]
        if asked == REST or (asked == ANY and level != ANY) or (level not in (ANY, asked)):
            return False
    return len(rule_levels) == len(wanted_levels)


def difference(shipped: Iterable[Permission], needed: Iterable[Permission]) -> str:
    extra = sorted(set(shipped) - set(needed))
    missing = sorted(set(needed) - set(shipped))
    return f"missing: {[str(p) for p in missing]}; more than needed: {[str(p) for p in extra]}"


def shipped() -> tuple[dict[str, set[Permission]], set[Permission]]:
    return parse_acl(ACL.read_text())


@pytest.mark.parametrize("role", [Role.GATEWAY, Role.MES])
def test_each_named_user_gets_exactly_what_the_code_uses(role: Role) -> None:
    users, _ = shipped()
    needed = broker_permissions()[role]
    assert users[role.value] == needed, difference(users[role.value], needed)


def test_equipment_gets_exactly_its_own_topics_and_no_other_user_exists() -> None:
    users, patterns = shipped()
    needed = broker_permissions()[Role.EQUIPMENT]
    assert patterns == needed, difference(patterns, needed)
    assert set(users) == {Role.GATEWAY.value, Role.MES.value}
    assert all(USER in permission.topic for permission in patterns)


def test_queue_and_paging_topics_are_in_the_list() -> None:
    """What the issue found missing: the MES could read neither the queue nor index pages."""
    mes = MesTopics()
    permissions = broker_permissions()
    for topic in (mes.queue(ANY), mes.index_page(ANY, ANY), mes.state_index(ANY)):
        assert Permission(Access.WRITE, topic) in permissions[Role.GATEWAY]
        assert Permission(Access.READ, topic) in permissions[Role.MES]


def test_the_check_notices_a_missing_or_an_extra_rule() -> None:
    """The comparison is not vacuous: drop one line, or add one, and it fails."""
    text = ACL.read_text()
    needed = broker_permissions()
    dropped, _ = parse_acl(text.replace("topic read jobs/+/queue\n", ""))
    assert dropped[Role.MES.value] != needed[Role.MES]
    added, _ = parse_acl(text.replace("user mes\n", "user mes\ntopic read jobs/#\n"))
    assert added[Role.MES.value] != needed[Role.MES]


def test_what_a_gateway_subscribes_to_is_allowed_to_its_user() -> None:
    """Every subscription of a gateway built with all default plugins on (role ``all``)."""
    environ = {
        "GATEWAY_REDIS_URL": "redis://127.0.0.1:1/0",  # built, never connected
        "GATEWAY_MQTT_URL": "mqtt://127.0.0.1:1",
        "GATEWAY_MQTT_EQUIPMENT_EQUIPMENT": "*",
        "GATEWAY_SIMULATOR_ENABLED": "true",
    }
    gateway = Gateway.from_environment(None, environ)
    binding = gateway.binding("mqtt")
    served = {topic for _, topic in binding.served_filters(gateway)} | {binding.reply_topic}  # type: ignore[attr-defined]
    reads = [p.topic for p in broker_permissions()[Role.GATEWAY] if p.access is Access.READ]
    assert len(served) > 5
    for subscription in served:
        topic = (
            subscription.split("/", 2)[2] if subscription.startswith("$share/") else subscription
        )
        assert any(covers(rule, topic) for rule in reads), f"{topic} is not in gateway.topics"


def test_equipment_may_use_its_own_topics_only() -> None:
    _, patterns = shipped()
    topics = EquipmentTopics()
    press = {Permission(p.access, p.topic.replace(USER, "press")) for p in patterns}
    assert Permission(Access.WRITE, topics.replies("press")) in press
    assert Permission(Access.READ, topics.commands("press")) in press
    assert not any(covers(p.topic, topics.replies("camera")) for p in press)


@pytest.mark.parametrize(
    ("rule", "wanted", "expected"),
    [
        ("jobs/+/commands", "jobs/+/commands", True),
        ("jobs/+/commands", "jobs/cell1/commands", True),
        ("jobs/cell1/commands", "jobs/+/commands", False),
        ("mes/replies/#", "mes/replies/cli/x", True),
        ("mes/replies/#", "mes/other", False),
        ("jobs/+/order/+", "jobs/+/order", False),
        ("jobs/+/order", "jobs/+/order/+", False),
        ("jobs/+/events", "jobs/#", False),
    ],
)
def test_filter_coverage(rule: str, wanted: str, expected: bool) -> None:
    assert covers(rule, wanted) is expected
