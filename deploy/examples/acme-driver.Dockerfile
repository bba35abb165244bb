# syntax=docker/dockerfile:1
#
# A station image with a third-party equipment driver: the example ACME nutrunner distribution
# in tests/thirdparty/gateway-acme-driver. From the repository root, after the base image:
#
#   docker build -f deploy/Dockerfile -t station-gateway:0.1.0 .
#   docker build -f deploy/examples/acme-driver.Dockerfile -t station-gateway-acme:0.1.0 .
#
# A driver published on a package index needs no build stage (deploy/README.md):
#
#   FROM station-gateway:0.1.0
#   USER root
#   RUN pip install --no-cache-dir gateway-acme-driver==0.3.0
#   USER 10001:10001

ARG GATEWAY_IMAGE=station-gateway:0.1.0

# -- build the driver's wheel (its source is not in the final image) ---------------------------
FROM python:3.11-slim-bookworm AS driver
WORKDIR /src
COPY tests/thirdparty/gateway-acme-driver ./
RUN pip wheel --no-deps --wheel-dir /wheels .

# -- the gateway image plus the driver ---------------------------------------------------------
FROM ${GATEWAY_IMAGE}
# The base image's virtual environment belongs to root; the gateway's user only runs it.
USER root
# station-gateway, the driver's only dependency, is already installed: no index is needed.
# `gateway plugins` lists it once its entry point (station_gateway.plugins) is installed.
RUN --mount=type=bind,from=driver,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels gateway-acme-driver \
 && gateway plugins | grep -q '^acme '
USER 10001:10001
