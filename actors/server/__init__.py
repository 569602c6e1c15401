"""The broker's side (Kafka's server module): its link to the controller, the supervision of its replicas,
replica hosts and the warm pool, worker processes, the log-directory lock, coordinator hosting, auto topic
creation, listeners, metrics counters and the server log. Used by the broker shell actors/broker.py
(server_log, log_dir_lock and metrics by every shell); may import actors/replication/, the pure parts of
actors/metadata/ and the shells it creates (controller, replica host, coordinators).
"""
