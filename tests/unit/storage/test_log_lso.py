"""The last stable offset after the producer state is rebuilt (truncation, reopen)."""

from __future__ import annotations

from storage.control import CONTROL_COMMIT, build_control_batch
from storage.log import Log, LogConfig
from storage.records import RecordBatchBuilder


def test_a_truncation_keeps_a_committed_transaction_below_the_hw_stable(tmp_path):
    lg = Log(str(tmp_path / "t-0"), LogConfig(), now_ms=0)
    b = RecordBatchBuilder(producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True)
    b.append(0, None, b"txn")
    lg.append_as_leader(b.build(), 0, now_ms=0)  # offset 0
    lg.append_as_leader(build_control_batch(CONTROL_COMMIT, 1, 0, 0, 0), 0, now_ms=0, origin="coordinator")  # 1
    plain = RecordBatchBuilder()
    plain.append(0, None, b"plain")
    lg.append_as_leader(plain.build(), 0, now_ms=0)  # offset 2
    lg.update_high_watermark(3)
    assert lg.last_stable_offset == 3
    assert lg.truncate_to(2)
    # the replayed commit marker (offset 1) is below the HW (2): nothing is unstable
    assert lg.high_watermark == 2 and lg.last_stable_offset == 2
    lg.close()
    again = Log(str(tmp_path / "t-0"), LogConfig(), now_ms=0)
    assert again.high_watermark == 2 and again.last_stable_offset == 2
    again.close()
