# Two entry points on a fresh machine: `make demo` and `make test`; each sets itself up.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench setup clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# Audits the bundled samples; kaudit exits 1 when it has findings, which is the point of a demo.
demo: $(STAMP)
	@echo "== kaudit segments fixtures/logdirs/demo  (a crafted broker log dir with planted anomalies)"
	$(PY) -m kaudit segments fixtures/logdirs/demo || [ $$? -eq 1 ]
	@echo "== kaudit pcap pcaps/*.pcap  (real Apache Kafka 3.0.2 captures: retries, a zombie, crafted sequences)"
	$(PY) -m kaudit pcap pcaps/*.pcap --kafka-port 9092 --kafka-port 9093 --kafka-port 9094 || [ $$? -eq 1 ]

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) benchmarks/bench_segments.py
	$(PY) benchmarks/bench_pcap.py
	$(PY) benchmarks/bench_audit.py
	$(PY) benchmarks/bench_spark.py
	KAUDIT_BENCH_SPARK_SHAPE=small $(PY) benchmarks/bench_spark.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
