"""TLS decryption with key logs (sans-IO): keylog.py (NSS key log, pcapng secrets; no
cryptography import, so the capture path can hold a key log cheaply), records.py (records,
handshake messages), handshake.py (hellos), keys.py (suites, PRF, HKDF), decrypt.py (record
protection), session.py (one connection's record layer). Import the modules themselves."""
