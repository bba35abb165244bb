"""Sequence recipes: ordered steps with parallel blocks, a second recipe format as a plugin."""

from gateway_sequence.model import DATASCHEMA

__all__ = ["DATASCHEMA"]
