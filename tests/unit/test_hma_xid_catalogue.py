"""HMA detections of Xids for which NVIDIA's catalogue lists no immediate action (analyzing-xid-catalog.html,
read 2026-12-04: 63 IGNORE/IGNORE, 94 RESTART_APP/IGNORE, 137 IGNORE/XID_137_FLOW): a P2 warning without a
node action, not a P1 'read the records' nor a reboot."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hyperpod_debugger.checks.logs import check_hma
from hyperpod_debugger.domain.model import Priority, Tag
from tests.builders import context
from tests.unit.test_checks_logs import hma_event, only, with_hma, xid_record


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (63, "Row Remapper: New row marked for remapping, reset gpu to activate."),
        (94, "Contained: SM (0x1). RST: No, D-RST: No"),
        (137, "NVLink: TLC RX PRIV Error"),
    ],
)
def test_a_no_action_xid_from_hma_is_a_p2_warning_without_node_action(code: int, text: str) -> None:
    obs = with_hma(*(hma_event(xid_record(code, text), age=timedelta(hours=h)) for h in (1, 4)))
    finding = only(check_hma(obs, context()))
    assert (finding.tag, finding.priority, finding.node_action) == (Tag.WARN, Priority.P2, "investigate")
    assert "no node action" in finding.message
    assert not any(c.mutates for c in finding.suggested_commands)
