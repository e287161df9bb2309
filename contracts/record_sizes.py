"""How large a Kafka record may get on its way through the pipeline, written once.

The input topics take what the broker takes by default (`message.max.bytes`, which a topic inherits unless
it sets `max.message.bytes`). A job sends the dead letter of a bad input record with its value whole, plus a
key `<topic>/<partition>/<offset>` and headers (reason, a detail of bounded length, query, origin, the
record's own key): at most the input record plus `DEAD_LETTER_HEADROOM_BYTES`. So the dead-letter topic's
`max.message.bytes` (set by contracts.pipeline) and the jobs' Kafka producers' `max.request.size` (set by
jobs.common.kafka_io) are both `DEAD_LETTER_MAX_MESSAGE_BYTES`: otherwise the dead letter of the largest
record the broker accepts fails the dead-letter query, and again on every restart.
"""

from __future__ import annotations

# Kafka's default `message.max.bytes` (1 MiB plus a record batch's log overhead), unchanged through 4.x.
INPUT_MAX_MESSAGE_BYTES = 1_048_588
# A dead letter's key, its headers besides the record's own key, and record framing, with room to spare.
DEAD_LETTER_HEADROOM_BYTES = 16 * 1024
DEAD_LETTER_MAX_MESSAGE_BYTES = INPUT_MAX_MESSAGE_BYTES + DEAD_LETTER_HEADROOM_BYTES
# The `dead_letter.detail` header quotes parts of the bad record; cut to this many characters (4 bytes
# each at most in UTF-8), so that the headers stay within the headroom.
MAX_DEAD_LETTER_DETAIL_CHARS = 1000
