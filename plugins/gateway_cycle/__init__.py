"""Cycle recipes: commands run in turn, ``cycles`` times; the example recipe format."""
