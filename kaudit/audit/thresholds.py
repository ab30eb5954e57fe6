"""The audit's judgement thresholds in one place: every time window and slack a rule decides
with, each beside the Kafka default or fact it follows. The rooms import them from here; a
module keeps the name (tests and readers find it where it is used). Memory bounds (how many
keys a fold remembers) and report caps stay beside the code they bound."""

from __future__ import annotations

# -- Kafka's own defaults ---------------------------------------------------------------------
# transaction.max.timeout.ms (broker): the longest a transaction may stay open when its own
# timeout is not in the evidence.
DEFAULT_MAX_TIMEOUT_MS = 900_000
DEFAULT_TIMEOUT_S = DEFAULT_MAX_TIMEOUT_MS / 1000.0
# transaction.timeout.ms (producer): how long a client's transaction may stay open when its
# InitProducerId is not in the evidence.
CLIENT_TIMEOUT_MS = 60_000
# KIP-939 two-phase commit: the coordinator never times such a transaction out.
NO_TIMEOUT_MS = 2**31 - 1
# request.timeout.ms (clients' default): a request without an answer this long is unanswered.
REQUEST_TIMEOUT_MS = 30_000
# A read_committed last stable offset stuck longer than transaction.max.timeout.ms: nothing
# will end the transaction holding it.
STUCK_MS = DEFAULT_MAX_TIMEOUT_MS

# producer.id.expiration.ms (broker): a producer idle this long may have had its state removed
# (ProducerStateManager.removeExpiredProducers), and a new entry made at its next write.
PRODUCER_ID_EXPIRATION_MS = 86_400_000

# -- how close in time facts must be to belong together -------------------------------------
# A marker further than this from every coordinator transaction's window has none.
MATCH_WINDOW_MS = 60_000
# The markers of one transaction are written within moments of each other.
MARKER_CLUSTER_MS = 2_000
# A transaction the coordinator decided (PrepareX) this recently before the end of the evidence
# may still have its markers on their way (WriteTxnMarkers, retried: request.timeout.ms 30 s).
MARKERS_IN_FLIGHT_MS = 30_000
# A late write is data created after the previous marker of its partition and this long
# before the coordinator registered the partition for the transaction whose marker ends it.
LATE_SLACK_MS = 100
# Client clocks against the coordinator's on disk: data created this long after its epoch
# ended was stored after it (the wire has one clock, the capture's: no slack).
EPOCH_SLACK_MS = 1_000
# A fenced instance's successor retries InitProducerId within moments.
FENCE_FOLLOW_MS = 5_000
# Copies of a non-idempotent producer's batch this close in time are a retry's.
WINDOW_MS = 5 * 60 * 1000
# A restarted application re-sends under a new producer id within its delivery timeout
# (delivery.timeout.ms, 2 min by default) plus the restart, generously.
RESTART_WINDOW_MS = 15 * 60 * 1000
# Attempts of a batch are remembered this long on the wire (delivery.timeout.ms: 2 min).
RETRY_WINDOW_S = 900

# -- the last stable offset on the wire -------------------------------------------------------
MIN_RESPONSES = 3      # Fetch responses that show the same LSO below the high watermark
MIN_SPAN_S = 10.0      # over at least this long (transactions normally end within moments)

# -- live captures ------------------------------------------------------------------------------
# A producer idle for its transaction timeout plus this margin is settled: the coordinator has
# aborted what it left open (it looks every 10 s and writes the markers at once).
TXN_MARGIN_S = 60.0
# A producer whose transaction the capture shows no end of is held this much longer: the
# coordinator's markers (its timeout abort) may show only when a lagging consumer fetches them.
MARKER_FETCH_WAIT_S = DEFAULT_TIMEOUT_S
