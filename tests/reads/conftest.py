"""What the read tests share: a counter of decoded live log batches."""

from __future__ import annotations

from typing import Any

import pytest

from fluss_lake.log import log_batch as log_batch_module
from fluss_lake.log import log_tablet as log_tablet_module


class Decodes:
    """Counts decoded log batches and the columns asked of each (wrapping decode_batch where the tablet calls it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[Any] = []
        original = log_batch_module.decode_batch

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(args[1] if len(args) > 1 else kwargs.get("columns"))
            return original(*args, **kwargs)

        monkeypatch.setattr(log_batch_module, "decode_batch", counting)
        monkeypatch.setattr(log_tablet_module, "decode_batch", counting)


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> Decodes:
    """Counts from now on (``decodes.calls.clear()`` to count from a later point)."""
    return Decodes(monkeypatch)
