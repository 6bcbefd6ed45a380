"""The smallest runtime configuration the unit tests load: word count's, from the environment."""

WORD_COUNT_ENV = {
    "FLOE_APP_ID": "word-count",
    "FLOE_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092",
    "FLOE_KAFKA_TOPICS": "lines",
    "FLOE_CASSANDRA_KEYSPACE": "floe",
    "FLOE_JOB_ENTRYPOINT": "examples/word-count/word_count.py",
}
