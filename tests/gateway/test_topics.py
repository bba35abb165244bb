"""The station's topics, built in one place (``gateway.topics``)."""

from __future__ import annotations

import pytest

from gateway.topics import (
    CLI_REPLY_PREFIX,
    MES_REPLY_PREFIX,
    EquipmentTopics,
    MesTopics,
    check_topic_level,
    check_topic_prefix,
    reply_topic,
)


def test_mes_topics_are_the_designs() -> None:
    mes = MesTopics("app/jobs")
    assert mes.commands("m42") == "app/jobs/m42/commands"
    assert mes.events("m42") == "app/jobs/m42/events"
    assert mes.metadata() == "app/jobs/metadata"
    assert mes.state_index("m42") == "app/jobs/m42/state-index"
    assert mes.order("m42", "JO-1") == "app/jobs/m42/order/JO-1"
    assert mes.result("m42", "JO-1") == "app/jobs/m42/result/JO-1"
    assert mes.queue("m42") == "app/jobs/m42/queue"
    assert mes.index_page("m42", 3) == "app/jobs/m42/index/3"
    assert MesTopics().commands("+") == "jobs/+/commands"


def test_equipment_topics_name_their_sender() -> None:
    topics = EquipmentTopics()
    assert topics.replies("press") == "equipment/press/replies"
    assert topics.sender("equipment/press/events") == "press"
    assert topics.sender("other/press/events") is None


def test_the_command_lines_replies_are_under_the_mes_reply_prefix() -> None:
    assert CLI_REPLY_PREFIX.startswith(MES_REPLY_PREFIX + "/")
    assert reply_topic(CLI_REPLY_PREFIX, "c1") == "mes/replies/cli/c1"


@pytest.mark.parametrize("bad", ["", "a/b", "a+", "#"])
def test_a_level_is_one_level(bad: str) -> None:
    with pytest.raises(ValueError, match="one MQTT topic level"):
        check_topic_level("equipment", bad)


@pytest.mark.parametrize("bad", ["", "/a", "a/", "a/+/b"])
def test_a_prefix_has_no_wildcards(bad: str) -> None:
    with pytest.raises(ValueError, match="without wildcards"):
        check_topic_prefix("topic_prefix", bad)
