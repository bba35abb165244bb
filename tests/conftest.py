"""Settings for the whole suite."""

from hypothesis import settings

# Property tests check behaviour, not speed: on a loaded machine (CI, parallel runs) an example
# may take longer than hypothesis's default 200 ms deadline, which would fail a correct test.
settings.register_profile("gateway", deadline=None)
settings.load_profile("gateway")
