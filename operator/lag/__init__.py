"""The lag wing: consumer lag of every app, its Prometheus series, and the autoscalers that act on it.

Beside the StreamingApp reconciler, and sharing with it the apps index and the Secret reads:

- `scrape`: end offsets from Kafka, committed offsets from Cassandra, time lag, Burrow status;
- `metrics`: the Prometheus series of a scrape and of the apps' health;
- `decide`: the native autoscaler's pure decision;
- `scale`: the native scale actuator (samples, the decision, the scale subresource, events);
- `status`: what status.lag and status.autoscaling say, and when they are written;
- `loop`: one tick per interval over every app, started with the operator;
- `scalers`: the pure builders of the HPA and KEDA children, which the reconcile applies.
"""
