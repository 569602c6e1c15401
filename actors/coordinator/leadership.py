"""Which LeaderAndIsr news a coordinator acts on (Kafka's onElection / onResignation ordering), pure: the
broker tells a coordinator, per internal-topic partition, that its replica leads at an epoch or no longer
leads; news older than the newest epoch seen for that partition is ignored. Shared by the group and the
transaction coordinators."""

from __future__ import annotations


class LeaderEpochs:
    def __init__(self) -> None:
        self.newest: dict[int, int] = {}

    def elected(self, partition: int, epoch: int, current_epoch: int | None, current_usable: bool) -> bool:
        """True: load the partition at ``epoch`` (unloading ``current`` first if there is one); False: stale
        or already loaded (or loading) at this epoch."""
        if epoch < self.newest.get(partition, -1):
            return False
        if current_epoch == epoch and current_usable:
            return False
        self.newest[partition] = epoch
        return True

    def resigned(self, partition: int, epoch: int | None, current_epoch: int | None) -> bool | None:
        """None: stale news, ignore; True: unload the current partition; False: nothing to unload.
        ``epoch`` None means the replica was stopped (unload whatever is loaded)."""
        if epoch is not None:
            if epoch < self.newest.get(partition, -1):
                return None
            self.newest[partition] = epoch
        return current_epoch is not None and (epoch is None or current_epoch <= epoch)
