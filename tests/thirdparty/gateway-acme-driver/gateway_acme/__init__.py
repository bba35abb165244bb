"""An example third-party equipment driver for the station gateway (ACME nutrunners)."""
