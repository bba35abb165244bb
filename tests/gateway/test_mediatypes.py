"""Media types: the leaf both CloudEvents and the codecs read, so neither imports the other."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gateway.codecs import codec_for
from gateway.mediatypes import JSON, MSGPACK, DataFormat, data_format


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        (None, DataFormat.JSON),
        ("application/json; charset=utf-8", DataFormat.JSON),
        ("application/cloudevents+json", DataFormat.JSON),
        ("Application/MsgPack", DataFormat.MSGPACK),
        ("application/x-msgpack", DataFormat.MSGPACK),
        ("text/plain", None),
    ],
)
def test_a_content_type_names_its_data_format(
    content_type: str | None, expected: DataFormat | None
) -> None:
    assert data_format(content_type) is expected
    codec = codec_for(content_type)
    assert (codec.content_type if codec else None) == (expected.value if expected else None)
    assert {DataFormat.JSON.value, DataFormat.MSGPACK.value} == {JSON, MSGPACK}


def test_the_cloudevent_model_loads_without_the_codecs() -> None:
    """``gateway.cloudevents`` needs no codec: no import cycle, not even a deferred one."""
    probe = "import sys, gateway.cloudevents; print('gateway.codecs' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"
