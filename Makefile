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

demo: $(STAMP)
	$(PY) -m kaudit decode segments fixtures/logdirs/demo --format table
	$(PY) -m kaudit decode pcap pcaps/05-fence-java.pcap --kafka-port 9092 --kafka-port 9093 --kafka-port 9094 --format table

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) benchmarks/bench_segments.py
	$(PY) benchmarks/bench_pcap.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
