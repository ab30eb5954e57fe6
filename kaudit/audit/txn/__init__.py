"""Transactions and producer epochs: the coordinator's records, the one model both feeds build, the transaction rules and the `kaudit txn` view."""
