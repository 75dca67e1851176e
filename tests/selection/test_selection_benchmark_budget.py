"""benchmarks/selection.py's ``--budget``: checked, and the budget a run used
is the one its report states (the default is the paper's 10 %)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "selection.py"
SAVED = ROOT / "benchmarks" / "results" / "selection_image_budget50.json"


def test_a_budget_outside_zero_to_one_is_refused_naming_the_option():
    for bad in ("0", "1.5", "-0.1"):
        run = subprocess.run([sys.executable, str(SCRIPT), "--budget", bad], capture_output=True, text=True)
        assert run.returncode == 2
        assert "--budget" in run.stderr and "expected a fraction of the total cost in (0, 1]" in run.stderr


def test_the_report_states_the_budget_the_run_used(tmp_path):
    saved = tmp_path / SAVED.name
    shutil.copy(SAVED, saved)
    assert json.loads(saved.read_text())["meta"]["budget"] == 0.5
    assert subprocess.run([sys.executable, str(SCRIPT), "--report-from", str(saved)]).returncode == 0
    assert "budget 50 %" in saved.with_suffix(".md").read_text()
    meta = json.loads(saved.read_text())
    del meta["meta"]["budget"]  # a run saved before the option: the paper's 10 %
    saved.write_text(json.dumps(meta))
    assert subprocess.run([sys.executable, str(SCRIPT), "--report-from", str(saved)]).returncode == 0
    assert "budget 10 %" in saved.with_suffix(".md").read_text()
