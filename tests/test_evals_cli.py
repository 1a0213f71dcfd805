"""``tether eval``: the 50-case example end to end, a baseline, --min-pass, bad input, Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tether import cli
from tether.evals import EvalReport

ROOT = Path(__file__).resolve().parent.parent
DATASET = str(ROOT / "examples" / "evals" / "capitals.jsonl")
AGENTS = str(ROOT / "examples" / "evals" / "capitals.py")


def test_fifty_cases_a_table_a_report_and_a_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """50 cases at concurrency 8: a table, JSON and HTML reports; a second run of a changed
    agent against the first as baseline names the regressed cases, and --min-pass fails it."""
    v1, html = tmp_path / "v1.json", tmp_path / "v1.html"
    argv = ["eval", DATASET, "--agent", f"{AGENTS}:agent", "--judge", "exact"]
    code = cli.main([*argv, "--concurrency", "8", "--out", str(v1), "--html", str(html), "--plain"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "pass rate 100.0% (50/50 evaluated, 50 runs)" in out
    assert "mean exact=1.000" in out
    lines = out.splitlines()
    assert sum(line.startswith("✓ ") for line in lines) == 50  # one progress line per case
    assert any(line.startswith("case ") and "passed" in line for line in lines)  # the table
    assert any(line.startswith("albania ") and "1/1" in line for line in lines)
    assert f"report written to {v1}" in err
    report = EvalReport.load(v1)
    assert len(report.results) == 50
    assert report.concurrency == 8
    assert "<table" in html.read_text()

    v2 = [
        "eval", DATASET, "--agent", f"{AGENTS}:agent_v2", "--judge", "exact",
        "--baseline", str(v1), "--min-pass", "0.9", "--plain",
    ]  # fmt: skip
    assert cli.main(v2) == 1
    out, err = capsys.readouterr()
    assert "pass rate 86.0%" in out
    assert "vs baseline: pass rate -14.0 pt, 7 regressed, 0 improved" in out
    assert "regressed: australia, brazil, canada, morocco, nigeria, switzerland, turkey" in out
    assert any(line.startswith("australia ▼ regressed") for line in out.splitlines())
    assert "pass rate 0.860 is below --min-pass 0.9" in err
    assert cli.main([*v2[:-3], "--min-pass", "0.85", "--plain"]) == 0
    capsys.readouterr()


def test_repeat_and_a_judge_from_a_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--repeat runs each case K times; --judge MODULE:ATTR loads judges (a list)."""
    judges = tmp_path / "judges.py"
    judges.write_text(
        "import tether\n"
        "from tether.evals import Contains\n"
        "JUDGES = [Contains(), tether.RuleJudge({'short': lambda c: len(c.text) < 12})]\n"
    )
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(Path(DATASET).read_text().splitlines()[:3]) + "\n")
    out_json = tmp_path / "r.json"
    code = cli.main(
        [
            "eval", str(small), "--agent", f"{AGENTS}:agent", "--judge", f"{judges}:JUDGES",
            "--repeat", "2", "--out", str(out_json), "--plain",
        ]
    )  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 0
    report = EvalReport.load(out_json)
    assert len(report.results) == 6
    assert report.judges == ("contains", "RuleJudge")
    assert "mean contains=1.000, RuleJudge.short=" in out


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["eval", "missing.jsonl", "--agent", f"{AGENTS}:agent"], 64, "no such file"),
        (["eval", DATASET, "--agent", f"{AGENTS}:nope"], 64, "has no attribute 'nope'"),
        (["eval", DATASET, "--agent", f"{AGENTS}:agent", "--judge", "fuzzy"], 64, "--judge takes"),
        (["eval", DATASET, "--agent", f"{AGENTS}:agent", "--min-pass", "2"], 64, "--min-pass"),
        (["eval", DATASET, "--agent", f"{AGENTS}:agent", "--baseline", DATASET], 64, "--baseline"),
    ],
)
def test_bad_input_is_one_line_and_exit_64(
    argv: list[str], code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the user got wrong is one line on stderr and exit 64, never a traceback."""
    assert cli.main(argv) == code
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_a_spent_budget_exits_2_with_the_partial_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-tokens stops the eval early: the partial table and report, and exit 2 (not 0,
    whatever the pass rate of the cases that ran)."""
    out_json = tmp_path / "r.json"
    argv = ["eval", DATASET, "--agent", f"{AGENTS}:agent", "--judge", "exact", "--plain"]
    code = cli.main([*argv, "--max-tokens", "100", "--concurrency", "1", "--out", str(out_json)])
    out, err = capsys.readouterr()
    assert code == 2
    assert "incomplete: " in out
    assert "the eval stopped early: " in err
    report = EvalReport.load(out_json)
    assert not report.complete
    assert report.aggregates().pass_rate == 1.0
    assert [r.status for r in report.results].count("skipped") >= 40


def test_an_invalid_dataset_exits_65(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A dataset whose content is wrong is a data error (65) naming the line."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "x"}\n{"inptu": "y"}\n')
    assert cli.main(["eval", str(bad), "--agent", f"{AGENTS}:agent"]) == 65
    assert "bad.jsonl:2: unknown key(s) 'inptu'" in capsys.readouterr().err


SLOW_AGENTS = """
import tether
from tether.providers import Reply, ScriptedProvider

agent = tether.Agent(
    name="slow",
    provider=ScriptedProvider(lambda request, ctx: Reply(text="Paris"), latency_s=0.25),
)
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_keeps_the_partial_report(backend: str, tmp_path: Path) -> None:
    """A real SIGINT stops the eval: the runs in flight are cancelled, the table and the
    partial report are written, and the exit code is 130."""
    agents = tmp_path / "slow_agents.py"
    agents.write_text(SLOW_AGENTS)
    out_json = tmp_path / "partial.json"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "tether", "eval", DATASET, "--agent", f"{agents}:agent",
            "--judge", "exact", "--concurrency", "2", "--out", str(out_json), "--plain",
            "--backend", backend,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.stdout is not None
    # Wait for the first results: the eval is under way (the signal watcher is up).
    first = proc.stdout.readline()
    assert first.startswith(("✓", "✗")), first
    time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "interrupted (Ctrl-C)" in err
    assert "incomplete: interrupted (Ctrl-C)" in out
    report = EvalReport.load(out_json)
    assert not report.complete
    statuses = [r.status for r in report.results]
    assert len(statuses) == 50
    assert statuses.count("evaluated") >= 1
    assert statuses.count("skipped") >= 30


def test_on_a_terminal_a_progress_bar_and_a_rich_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With rich on a terminal: a progress bar with the pass rate and spend, then a table."""
    console_mod = pytest.importorskip("rich.console")
    import io

    from tether.cli import _eval_cmd

    screen = io.StringIO()
    console = console_mod.Console(file=screen, force_terminal=True, width=140, color_system=None)
    monkeypatch.setattr(_eval_cmd, "_rich_console", lambda plain: console)
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(Path(DATASET).read_text().splitlines()[:5]) + "\n")
    assert cli.main(["eval", str(small), "--agent", f"{AGENTS}:agent", "--judge", "exact"]) == 0
    text = screen.getvalue()
    assert "5/5" in text  # the bar's count
    assert "pass 100.0% · spend $0.0" in text
    assert "capitals on small" in text  # the table's title
    assert "│ albania" in text
    assert "pass rate 100.0% (5/5 evaluated, 5 runs)" in text
