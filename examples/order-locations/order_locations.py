"""Latest location per order, served by the store's HTTP query endpoint.

Input: records keyed by order id with JSON values `{"order_id", "lat", "lon", "ts"}`.
Records that are not such JSON go to `<app-id>-dlq`. The latest value per order (by offset)
is kept in the partitioned store `order-locations` (key: order id, `str`; value: JSON text)
and emitted to the first output topic.

Query: GET http://<pod>:<metrics.query_port>/stores/order-locations/keys/<order-id>
"""

from __future__ import annotations

from floe_jobs.api import Batch, Job
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

job = Job()
job.expose("order-locations", key_serde="str", value_serde="json")

SCHEMA = "order_id string, lat double, lon double, ts long"


@job.stage()
def latest_location(batch: Batch) -> DataFrame:
    orders = batch.decode_json(batch.df, SCHEMA).where(F.col("order_id").isNotNull())
    latest = batch.latest(
        orders,
        store="order-locations",
        key=F.col("order_id"),
        value=F.struct("lat", "lon", "ts"),
    )
    return latest.select(F.col("key"), F.col("value"))
