"""The consumers' room: consumer-group timelines from the wire (timeline.py; the served ranges as
columns, serve_table.py), the rules that judge them (rules_redelivery.py, rules.py, rules_poll.py;
found.py builds their findings; certify.py sets aside what they cannot find anything in) and
their fold (fold.py); `kaudit consumers` prints them."""

from kaudit.audit.consumers import rules, rules_poll  # noqa: F401  (registers the rules)
