# syntax=docker/dockerfile:1.7
# The Floe operator: the floe-operator command and the libraries it imports, without Spark.
#
#   docker build -f images/operator.Dockerfile -t ghcr.io/floe-dev/floe-operator:0.1.0 .
#
# The build context is the repository root. The operator shares the Cassandra DDL and the
# offsets layout with the job runtime (floe_jobs), so it installs the product's distribution
# (the local stack left out, as in the job image), but not pyspark: nothing the operator
# imports needs it, and it is most of the job image.

# The base: Debian bookworm with Python 3.11 and pip. `make up NODE=1` builds one here from
# Debian's packages and passes it as --build-arg PYTHON_IMAGE=localhost/floe/base:<key>.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
# The source tree's operator/ must not shadow the standard library's operator module in any
# Python started here (python -m, and the build tools' own subprocesses).
ENV PYTHONSAFEPATH=1
# pip, build and the build backend, each pinned with its sha256 (requirements/build.lock).
COPY requirements/build.lock /tmp/
RUN pip install --no-cache-dir --require-hashes -r /tmp/build.lock
# The runtime dependencies minus pyspark (requirements/operator.lock leaves it and py4j out)
# first, so that a change to Floe's own code rebuilds only Floe's wheel and the layers after it.
# Every file pip fetches is checked against the lock's sha256 (--require-hashes); an sdist would
# build without isolation, with the locked setuptools, so nothing unhashed is fetched to build.
COPY requirements/operator.lock /tmp/
RUN pip wheel --no-cache-dir --require-hashes --no-build-isolation --wheel-dir /deps -r /tmp/operator.lock
COPY pyproject.toml ./
COPY README.md ./
# Apache-2.0 asks that the license and the notice travel with the software: the wheel
# carries them (setuptools picks up LICENSE and NOTICE), in its dist-info/licenses/.
COPY LICENSE NOTICE ./
COPY operator/ operator/
COPY jobs/ jobs/
# The product only: the wheel leaves out the local stack (floe_stack), which nothing in the
# operator or the runtime imports.
COPY images/product_pyproject.py /tmp/
RUN python /tmp/product_pyproject.py pyproject.toml > pyproject.product.toml \
 && mv pyproject.product.toml pyproject.toml \
 && python -m build --wheel --no-isolation --outdir /wheels .

FROM ${PYTHON_IMAGE}
ARG UID=10001
RUN groupadd --gid ${UID} floe \
 && useradd --uid ${UID} --gid ${UID} --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin floe
COPY --from=build /deps /deps
# The wheels the build stage checked against the lock (or built from a checked sdist), nothing else.
RUN pip install --no-cache-dir --no-index --no-deps /deps/*.whl && rm -rf /deps
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --no-deps /wheels/floe-*.whl && rm -rf /wheels
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# Metrics (FLOE_METRICS_PORT) and Kopf's /healthz (FLOE_LIVENESS_PORT).
EXPOSE 8080 8081
USER 10001:10001
ENTRYPOINT ["floe-operator"]
