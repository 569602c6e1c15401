"""rafka: Apache Kafka's design on Ray. The public client API.

import rafka
with rafka.LocalCluster(brokers=3) as cluster:
    rafka.Admin(cluster).create_topic("clicks", num_partitions=6, replication_factor=3)
    with rafka.Producer(cluster) as p:
        p.send("clicks", b"hello", key=b"user-1")
    c = rafka.Consumer(cluster, auto_offset_reset="earliest")
    c.assign([rafka.TopicPartition("clicks", p) for p in range(6)])
    print(c.poll(timeout_ms=1000))
"""

from protocol import errors
from rafka.admin.admin import Admin, NewTopic
from rafka.cluster import ClusterHandle, Deployment, LocalCluster, connect, deploy
from rafka.consumer.consumer import Consumer
from rafka.consumer.consumer_coordinator import ConsumerRebalanceListener
from rafka.producer.producer import Producer
from rafka.structs import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    PartitionInfo,
    RecordMetadata,
    TopicPartition,
)

__version__ = "0.1.0"

__all__ = [
    "Admin",
    "NewTopic",
    "ClusterHandle",
    "Deployment",
    "LocalCluster",
    "connect",
    "deploy",
    "Consumer",
    "Producer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PartitionInfo",
    "RecordMetadata",
    "TopicPartition",
    "errors",
    "__version__",
]
