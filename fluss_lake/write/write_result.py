"""What a flushed write committed: per bucket, the offsets its batch took."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["WriteResult"]


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Rows sent, changelog records produced, and ``bucket -> (base_offset, next_offset)`` of each batch."""

    rows: int = 0
    records: int = 0
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)

    def combine(self, later: WriteResult) -> WriteResult:
        """This result followed by `later` (auto-flushed batches of one writer)."""
        offsets = dict(self.offsets)
        for bucket, (base, end) in later.offsets.items():
            offsets[bucket] = (offsets[bucket][0], end) if bucket in offsets else (base, end)
        return WriteResult(self.rows + later.rows, self.records + later.records, offsets)

    @property
    def end_offsets(self) -> dict[int, int]:
        """Log end offset of each written bucket right after this write."""
        return {bucket: end for bucket, (_, end) in self.offsets.items()}
