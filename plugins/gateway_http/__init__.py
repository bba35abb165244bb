"""Health, readiness and Prometheus metrics over HTTP, one endpoint per gateway instance."""
