"""deploy/prometheus/: the alerting rules load as Prometheus loads them (promtool check rules) and
fire as their unit tests say (promtool test rules). ``make promtool`` installs promtool; without
it this fails, it does not skip."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

RULES = Path(__file__).resolve().parents[1] / "deploy" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: `make promtool` installs it (Debian's prometheus package)"
    return subprocess.run([tool, *args], cwd=RULES, capture_output=True, text=True, check=False)


def test_the_rules_load() -> None:
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "3 rules found" in checked.stdout


def test_the_rules_fire_as_their_unit_tests_say() -> None:
    tested = promtool("test", "rules", "alerts_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_rules_read_the_gauge_the_platform_exports() -> None:
    from contextplatform.core import metrics

    text = (RULES / "alerts.yml").read_text()
    assert metrics.SOURCE_HEALTH_ALERT._name in text
    for alert in metrics.SOURCE_HEALTH_ALERTS:
        assert f'alert="{alert}"' in text
