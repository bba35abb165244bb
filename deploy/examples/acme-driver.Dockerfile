# A station image with a third-party equipment driver: the example ACME nutrunner distribution
# in tests/thirdparty/gateway-acme-driver. From the repository root, after the base image:
#
#   docker build -f deploy/Dockerfile -t station-gateway:0.1.0 .
#   docker build -f deploy/examples/acme-driver.Dockerfile -t station-gateway-acme:0.1.0 .
#
# Both bases are build arguments: the gateway image (GATEWAY_IMAGE, e.g. where you pushed it) and
# the Python image the driver's wheel is built on (PYTHON_IMAGE, the gateway image's own base):
#
#   docker build -f deploy/examples/acme-driver.Dockerfile \
#     --build-arg GATEWAY_IMAGE=registry.example.com/station-gateway:0.1.0 \
#     --build-arg PYTHON_IMAGE=registry.example.com/python:3.11-slim-bookworm -t ... .
#
# A driver published on a package index needs no build stage (deploy/README.md):
#
#   FROM station-gateway:0.1.0
#   USER 0
#   RUN pip install --no-cache-dir gateway-acme-driver==0.3.0
#   USER 10001:10001

ARG GATEWAY_IMAGE=station-gateway:0.1.0
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- build the driver's wheel (its source is not in the final image) ---------------------------
FROM ${PYTHON_IMAGE} AS driver
WORKDIR /src
COPY tests/thirdparty/gateway-acme-driver ./
RUN pip wheel --no-deps --wheel-dir /wheels .

# -- the gateway image plus the driver ---------------------------------------------------------
FROM ${GATEWAY_IMAGE}
# The base image's virtual environment belongs to root (uid 0); the gateway's user only runs it.
USER 0
# The check below pipes into grep: a failing `gateway plugins` must fail the build.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# station-gateway, the driver's only dependency, is already installed: no index is needed, and
# the only wheel there is the one built above (no version to pin in the command, DL3013).
# `gateway plugins` lists it once its entry point (station_gateway.plugins) is installed.
# hadolint ignore=DL3013
RUN --mount=type=bind,from=driver,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels gateway-acme-driver \
 && gateway plugins | grep -q '^acme '
USER 10001:10001
