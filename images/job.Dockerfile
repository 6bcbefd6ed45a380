# syntax=docker/dockerfile:1.7
# The Floe job runtime: the floe-job command, PySpark with a Java runtime, Spark's Kafka
# connector jars and the examples. App images build FROM it and add their code.
#
#   docker build -f images/job.Dockerfile -t ghcr.io/floe-dev/floe-job:0.1.0 .
#
# The build context is the repository root. Pods run it as uid 185 (the StreamingApp's
# spec.pod.runAsUser default, as in Spark's own images) with a read-only root filesystem and
# a writable /tmp, where Spark keeps its scratch space (spark.local.dir) and Ivy cache.

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
# The runtime dependencies (requirements/runtime.lock) first, so that a change to Floe's own
# code rebuilds only Floe's wheel and the layers after it. Every file pip fetches is checked against the lock's sha256 (--require-hashes); sdists (pyspark's)
# build without isolation, with the locked setuptools, so nothing unhashed is fetched to build.
COPY requirements/runtime.lock /tmp/
RUN pip wheel --no-cache-dir --require-hashes --no-build-isolation --wheel-dir /deps -r /tmp/runtime.lock
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
# Spark 4 runs on Java 17; procps gives Spark's scripts `ps`. /opt/java points at the JRE
# whatever the architecture.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java
ARG UID=185
RUN groupadd --gid ${UID} spark \
 && useradd --uid ${UID} --gid ${UID} --no-create-home --home-dir /tmp --shell /usr/sbin/nologin spark

COPY --from=build /deps /deps
# The wheels the build stage checked against the lock (or built from a checked sdist), nothing else.
RUN pip install --no-cache-dir --no-index --no-deps /deps/*.whl && rm -rf /deps

# Spark's Kafka source and what it needs beyond pyspark, matching pyspark 4.0.0 (Scala 2.13),
# from Maven Central, checked against pinned digests (a RUN step rather than ADD --checksum, so
# builders without that flag, such as buildah, build this file too).
ARG MAVEN=https://repo1.maven.org/maven2
ADD --chmod=644 ${MAVEN}/org/apache/spark/spark-sql-kafka-0-10_2.13/4.0.0/spark-sql-kafka-0-10_2.13-4.0.0.jar /opt/floe/jars/
ADD --chmod=644 ${MAVEN}/org/apache/spark/spark-token-provider-kafka-0-10_2.13/4.0.0/spark-token-provider-kafka-0-10_2.13-4.0.0.jar /opt/floe/jars/
ADD --chmod=644 ${MAVEN}/org/apache/kafka/kafka-clients/3.9.0/kafka-clients-3.9.0.jar /opt/floe/jars/
ADD --chmod=644 ${MAVEN}/org/apache/commons/commons-pool2/2.12.0/commons-pool2-2.12.0.jar /opt/floe/jars/
RUN cd /opt/floe/jars && printf '%s  %s\n' \
      33a3b8b04df4a2e43c9d5bf8ca5972936a1ac662f2714e014d00ef6f27468bf3 spark-sql-kafka-0-10_2.13-4.0.0.jar \
      f2be3b76f9e6cbe63379d4e4e0dc14f59dbf056ae2ad16ff15ac108004c86767 spark-token-provider-kafka-0-10_2.13-4.0.0.jar \
      15c1e137f2c2c94398e27abc4060a03b6bde10bf9fac15e8f70c02320b202f18 kafka-clients-3.9.0.jar \
      6d3bd18df8410f3e31b031aca582cc109342358a62a2759ebd0c4cdf30d06f8b commons-pool2-2.12.0.jar \
    | sha256sum -c -

COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --no-deps /wheels/floe-*.whl && rm -rf /wheels

# The driver JVM's class archive (floe_jobs.classarchive): a training run's classes, which every
# replica's JVM maps from this file instead of loading them from the jars (about a quarter of
# the CPU of its start). The runtime finds it at this path (floe_jobs.sparkio.IMAGE_CLASS_ARCHIVE).
# (The build sandbox's hostname does not resolve: Spark is told its address.)
RUN SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=localhost floe-job class-archive /opt/floe/spark-classes.jsa

# The examples, so examples/*/streamingapp.yaml run on this image as they are.
WORKDIR /opt/floe
COPY examples/ examples/

ENV JAVA_HOME=/opt/java \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    SPARK_USER=spark \
    FLOE_SPARK_JARS=/opt/floe/jars/spark-sql-kafka-0-10_2.13-4.0.0.jar,/opt/floe/jars/spark-token-provider-kafka-0-10_2.13-4.0.0.jar,/opt/floe/jars/kafka-clients-3.9.0.jar,/opt/floe/jars/commons-pool2-2.12.0.jar
# The runtime's /metrics, /healthz, /readyz and state queries (spec.metrics.port).
EXPOSE 9400
USER 185:185
# floe-job runs as PID 1 and handles SIGTERM itself: it drains the batch, commits and leaves
# the Kafka group (the operator sets the same command in the pod).
ENTRYPOINT ["floe-job"]

# What this image's runtime is: its release, and the configuration schema it reads
# (floe_jobs.config.CONFIG_SCHEMA). An operator of a newer schema may render keys this runtime
# does not have; it then refuses to start and names both schemas (docs/releasing.md, "Version
# skew"). A unit test keeps these defaults equal to pyproject.toml's version and the runtime's.
ARG FLOE_VERSION=0.1.0
ARG FLOE_CONFIG_SCHEMA=1
LABEL org.opencontainers.image.version="${FLOE_VERSION}" \
      dev.floe.config-schema="${FLOE_CONFIG_SCHEMA}"
