"""An example third-party plugin for the station gateway."""
