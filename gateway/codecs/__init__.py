"""Wire formats: one module per format.

- ``gateway.codecs.json`` / ``gateway.codecs.msgpack``: CloudEvent ``data`` codecs (cattrs)
- ``gateway.codecs.mqtt``: the CloudEvents binary-mode mapping onto MQTT v5 properties

``codec_for(content_type)`` picks the data codec a message's content type asks for.
"""

from __future__ import annotations

from gateway.codecs.base import DataCodec, codec_for, decode_data, encode_data

__all__ = ["DataCodec", "codec_for", "decode_data", "encode_data"]
