"""The controller's logic (Kafka's metadata module): the metadata image and its records, the store (metadata
log, GCS KV), the decisions, the requests a commit sends and the channel that sends them. Used by the
controller shell actors/controller.py (and ``config_sources`` / ``topic_configs`` by the broker side); imports
protocol/, storage/ and the replicas' config defaults, never actors/server/.
"""
