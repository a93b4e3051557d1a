"""The group coordinator's records in `__consumer_offsets`, decoded per Kafka's own schemas.

- `decode`: the plain decoder, one record's key and value in, a dict out (no pyspark, no
  Kafka client: importable alone);
- `wire`: the byte reader under it (Kafka's classic and compact encodings, tagged fields);
- `tables`: the decoder applied in Spark, and the Delta tables `decode-offsets` writes.
"""
