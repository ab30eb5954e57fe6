# Two entry points on a fresh machine: `make demo` and `make test`; each sets itself up.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench docs setup compile browser clean

# `pip install -e` also builds the compiled core (setup.py: Cython extensions, the machine's gcc);
# a changed .pyx or C header rebuilds it. tshark (Debian's package) is for the test that checks
# kaudit against Wireshark's Kafka dissector (tests/corpus/test_wireshark_agree.py); without root
# or apt the set-up goes on and that test says why it skips.
$(STAMP): pyproject.toml setup.py $(wildcard kaudit/*/*.pyx kaudit/*/*.pxd kaudit/*/*.pxi kaudit/*/*.h)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@command -v tshark >/dev/null || ./.ci/install-tshark || echo "tshark not installed: the Wireshark cross-check will skip"
	touch $(STAMP)

setup: $(STAMP)

# Byte-compiles kaudit's own modules (an editable install has none, and with
# PYTHONDONTWRITEBYTECODE set every process - each pcap worker, each Spark worker - would
# compile them again at start-up: ~0.2 s). Only changed files are compiled again.
compile: $(STAMP)
	@$(PY) -m compileall -q kaudit

# Audits the bundled samples; kaudit exits 1 when it has findings, which is the point of a demo.
# Each part's first lines name its incidents; the same reports, with charts, go to build/*.html.
demo: compile
	@$(PY) -m kaudit segments fixtures/logdirs/demo || [ $$? -eq 1 ]
	@echo
	@$(PY) -m kaudit pcap pcaps --kafka-port 9092 --kafka-port 9093 --kafka-port 9094 || [ $$? -eq 1 ]
	@mkdir -p build
	@$(PY) -m kaudit segments fixtures/logdirs/demo --format html -o build/demo-segments.html || [ $$? -eq 1 ]
	@$(PY) -m kaudit pcap pcaps --kafka-port 9092 --kafka-port 9093 --kafka-port 9094 --format html \
	  -o build/demo-pcap.html || [ $$? -eq 1 ]
	@echo
	@echo "In a browser (offline, self-contained): build/demo-segments.html build/demo-pcap.html"

# The HTML report's browser test (tests/report/test_html_browser.py) opens the demo's reports in
# Debian's chromium, headless: installed here when missing (as root or with passwordless sudo).
# Without it the test skips on a developer's machine and fails under CI (CI=true), where it must run.
browser:
	@command -v chromium >/dev/null || ./.ci/install-chromium || \
	  echo "chromium not installed: the browser test will skip (and fail under CI)"

# Two test processes (pytest-xdist), each file kept in one of them (its module fixtures built
# once); the slowest files are handed out first (tests/conftest.py) so both end together -
# --no-loadscope-reorder, or xdist hands files out by their number of tests instead, and the
# slow files (a Spark cluster, few tests each) come last.
test: compile browser
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder

bench: compile
	$(PY) benchmarks/bench_segments.py
	$(PY) benchmarks/bench_pcap.py
	$(PY) benchmarks/bench_tls.py
	$(PY) benchmarks/bench_live.py
	$(PY) benchmarks/bench_audit.py
	$(PY) benchmarks/bench_spark.py
	KAUDIT_BENCH_SPARK_SHAPE=small $(PY) benchmarks/bench_spark.py
	KAUDIT_SIM_EXAMPLES=25 KAUDIT_SIM_SPARK=1 $(PY) -m pytest tests/sim -q -rxX -p no:cacheprovider

# docs/rules.md from the rule registry (tests/report/test_rules_doc.py fails while it is stale):
# run after adding or changing a rule.
docs: $(STAMP)
	$(PY) -m kaudit.report.rules_doc > docs/rules.md.tmp && mv docs/rules.md.tmp docs/rules.md

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
