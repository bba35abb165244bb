"""Settings shared by the whole test suite."""

from hypothesis import HealthCheck, settings

# The suite runs on shared, loaded machines (CI, several test runs at once): how fast Hypothesis
# generates data or runs one example is not what any property test proves, so neither its
# per-example deadline nor its "data generation too slow" health check may fail a test.
settings.register_profile(
    "shared-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("shared-machine")
