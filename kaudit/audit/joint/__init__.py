"""Wire and disk together (`kaudit audit`): what the clients were told against what the logs hold."""
