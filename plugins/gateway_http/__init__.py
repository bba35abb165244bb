"""Health, readiness, Prometheus metrics and the applications of other plugins over HTTP."""
