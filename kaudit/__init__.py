"""kaudit: a Kafka protocol analyzer and transaction auditor."""

__version__ = "0.1.0"
