# Two entry points on a fresh machine: `make demo` and `make test`; each sets itself up.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench setup compile clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# Byte-compiles kaudit's own modules (an editable install has none, and with
# PYTHONDONTWRITEBYTECODE set every process - each pcap worker, each Spark worker - would
# compile them again at start-up: ~0.2 s). Only changed files are compiled again.
compile: $(STAMP)
	$(PY) -m compileall -q kaudit

# Audits the bundled samples; kaudit exits 1 when it has findings, which is the point of a demo.
demo: compile
	@echo "== kaudit segments fixtures/logdirs/demo  (a crafted broker log dir with planted anomalies)"
	$(PY) -m kaudit segments fixtures/logdirs/demo || [ $$? -eq 1 ]
	@echo "== kaudit pcap pcaps/*.pcap  (real Apache Kafka 3.0.2 captures: retries, a zombie, crafted sequences)"
	$(PY) -m kaudit pcap pcaps/*.pcap --kafka-port 9092 --kafka-port 9093 --kafka-port 9094 || [ $$? -eq 1 ]

test: compile
	$(PY) -m pytest

bench: compile
	$(PY) benchmarks/bench_segments.py
	$(PY) benchmarks/bench_pcap.py
	$(PY) benchmarks/bench_audit.py
	$(PY) benchmarks/bench_spark.py
	KAUDIT_BENCH_SPARK_SHAPE=small $(PY) benchmarks/bench_spark.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
