"""The consumers' room: consumer-group timelines from the wire (timeline.py), the rules that
judge them (rules_redelivery.py, rules.py, rules_poll.py; found.py builds their findings) and their
fold (fold.py); `kaudit consumers` prints them."""

from kaudit.audit.consumers import rules, rules_poll  # noqa: F401  (registers the rules)
