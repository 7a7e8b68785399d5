"""The command line (`python -m npu_lab ...`): every subcommand, its --help, files it writes and
one-line errors for bad arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from npu_lab import __main__ as entry
from npu_lab.cli import main
from npu_lab.kernels.moe_gating import VERSIONS
from npu_lab.presets import list_presets

REPO = Path(__file__).resolve().parent.parent


def _run_module(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "npu_lab", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120)


def _assert_one_line_error(err: str):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("npu_lab: error: ")
    assert "Traceback" not in err


def test_console_script_entry_is_cli_main():
    assert entry.main is main


# ------------------------------------------------------------------------------------- help
@pytest.mark.parametrize("command, options", [
    ("sweep", ["--version", "--B", "--S", "--E", "--K", "--chip", "--tile-s", "--csv", "--html"]),
    ("trace", ["--version", "--chip", "--tile-s", "--max-blocks", "--output", "perfetto"]),
    ("run", ["--version", "--seed", "--dtype", "--tile-s"]),
    ("chips", ["--show"]),
    ("claims", ["--chip"]),
])
def test_subcommand_help(capsys, command, options):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m npu_lab " + command)
    for option in options:
        assert option in out
    if command in ("sweep", "trace", "run"):
        assert all(v in out for v in VERSIONS)


def test_top_level_help_lists_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("sweep", "trace", "run", "chips", "claims"):
        assert command in out


# ------------------------------------------------------------------------------------- sweep
def test_sweep_prints_article_table(capsys):
    assert main(["sweep", "--version", "v1", "--B", "1", "--S", "1024", "--E", "64", "--K", "2",
                 "--chip", "article", "--tile-s", "1,4,8,16,32"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "v1 on article" in lines[0] and "B=1 S=1024 E=64 K=2" in lines[0]
    for column in ("tileS", "blocks", "UB used KB", "latency µs", "core util", "bottleneck", "article µs"):
        assert column in lines[1]
    rows = [line.split() for line in lines[2:7]]
    assert [int(r[0]) for r in rows] == [1, 4, 8, 16, 32]
    assert [int(r[1]) for r in rows] == [1024, 256, 128, 64, 32]       # v1: one block per tile
    assert [int(r[-1]) for r in rows] == [1500, 450, 280, 310, 350]    # the article's measurements
    assert lines[7].startswith("best: tileS=")


def test_sweep_writes_csv_and_standalone_html(tmp_path, capsys):
    csv, html = tmp_path / "sweep.csv", tmp_path / "sweep.html"
    assert main(["sweep", "--version", "v2", "--S", "256", "--tile-s", "2,8,32",
                 "--csv", str(csv), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    best = int(out.split("best: tileS=")[1].split()[0])
    df = pd.read_csv(csv)
    assert df["tileS"].tolist() == [2, 8, 32]
    assert {"blocks", "ub_used_kb", "latency_us", "core_utilisation", "bottleneck"} <= set(df.columns)
    assert best == int(df.loc[df["latency_us"].idxmin(), "tileS"])
    page = html.read_text(encoding="utf-8")
    assert page.lstrip().lower().startswith(("<html", "<!doctype html")) and "</html>" in page
    assert len(page) > 1_000_000                       # plotly.js embedded: works offline
    assert 'src="https://cdn.plot.ly' not in page          # no CDN script tag
    assert f"best: tileS={best}" in page


def test_sweep_discrete_says_tile_s_does_not_apply(capsys):
    assert main(["sweep", "--version", "discrete", "--S", "64", "--tile-s", "1,8"]) == 0
    assert "does not tile by tileS" in capsys.readouterr().out


# ------------------------------------------------------------------------------------- trace
def test_trace_writes_chrome_trace(tmp_path, capsys):
    path = tmp_path / "trace.json"
    assert main(["trace", "--version", "v3", "--S", "1024", "--tile-s", "8", "-o", str(path)]) == 0
    out = capsys.readouterr().out.strip()
    assert len(out.splitlines()) == 1
    assert "latency" in out and "-bound" in out and "ui.perfetto.dev" in out and "chrome://tracing" in out
    doc = json.loads(path.read_text())
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert complete and all("ts" in e and "dur" in e and "pid" in e and "tid" in e for e in complete)
    assert f"wrote {len(complete)} events" in out
    assert {e["cat"] for e in complete} >= {"MTE2", "V", "MTE3"}


def test_trace_max_blocks_limits_events(tmp_path, capsys):
    full, part = tmp_path / "full.json", tmp_path / "part.json"
    assert main(["trace", "--version", "v1", "--S", "64", "--tile-s", "1", "-o", str(full)]) == 0
    assert main(["trace", "--version", "v1", "--S", "64", "--tile-s", "1", "--max-blocks", "2",
                 "-o", str(part)]) == 0
    assert "first 2 of 64 blocks" in capsys.readouterr().out
    count = [sum(e["ph"] == "X" for e in json.loads(p.read_text())["traceEvents"]) for p in (full, part)]
    assert 0 < count[1] < count[0]


# ------------------------------------------------------------------------------------- run / chips / claims
@pytest.mark.parametrize("version", ["v1", "v3", "discrete"])
def test_run_checks_against_reference(capsys, version):
    assert main(["run", "--version", version, "--B", "2", "--S", "37", "--E", "13", "--K", "3",
                 "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "indices match: yes, max weight error: " in out
    err = float(out.split("max weight error: ")[1].split()[0])
    assert err < 1e-5
    assert "latency" in out and "µs" in out


def test_chips_lists_presets_with_key_numbers(capsys):
    assert main(["chips"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    for column in ("vector cores", "clock GHz", "UB KB", "usable KB", "HBM GB/s", "launch µs"):
        assert column in header
    for name in list_presets():
        assert name in out
    row = next(line for line in out.splitlines() if line.startswith("ascend-910b2"))
    assert row.split()[1:7] == ["48", "1.80", "192", "183.75", "1600", "20.0"]     # 192 KB - 256 B - 8 KB usable


def test_chips_show_prints_provenance(capsys):
    assert main(["chips", "--show", "910b2"]) == 0      # aliases work
    out = capsys.readouterr().out
    assert out.startswith("ascend-910b2")
    assert "ub_bytes" in out and "vendor-config" in out and "assumed" in out
    assert "192 KB per AIV" in out


def test_claims_prints_each_claim_with_verdict(capsys):
    assert main(["claims", "--chip", "article"]) == 0
    out = capsys.readouterr().out
    assert "sweet spot at tileS = 8" in out and "double buffering" in out
    assert "verdict" in out
    # each claim row ends in its verdict; "reproduced" must be a whole verdict, not the tail of
    # "not reproduced", and it must match the library's own table
    from npu_lab.kernels.moe_gating import reproduce_article_claims

    table = reproduce_article_claims("article")
    rows = [ln for ln in out.splitlines() if ln.rstrip().endswith(("reproduced", "partly"))]
    verdicts = ["not reproduced" if ln.rstrip().endswith("not reproduced") else ln.split()[-1] for ln in rows]
    assert verdicts == table["verdict"].tolist()
    assert "reproduced" in verdicts, "no claim is reproduced on the article preset"


# ------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("argv, reason", [
    (["sweep", "--version", "v9"], "invalid choice: 'v9'"),
    (["sweep", "--chip", "h100"], "unknown chip 'h100'"),
    (["trace", "--chip", "nope", "-o", "t.json"], "unknown chip"),
    (["sweep", "--K", "65"], "K=65, E=64"),
    (["run", "--E", "4", "--K", "5"], "at most --E"),
    (["sweep", "--tile-s", "1,x"], "comma-separated list"),
    (["sweep", "--tile-s", "4,0"], "comma-separated list"),
    (["sweep", "--tile-s", "4;8"], "comma-separated list"),
    (["sweep", "--S", "0"], "--S"),
    (["sweep", "--E", "4096", "--tile-s", "1,64"], "does not fit"),
    (["trace", "--tile-s", "512", "-o", "t.json"], "does not fit"),
    (["trace", "--tile-s", "4,8", "-o", "t.json"], "--tile-s"),
    (["trace"], "--output"),
    (["chips", "--show", "nope"], "unknown chip"),
    (["claims", "--chip", "nope"], "unknown chip"),
    (["frobnicate"], "invalid choice"),
    ([], "choose a command"),
])
def test_bad_arguments_give_one_line_reason(capsys, tmp_path, monkeypatch, argv, reason):
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code != 0
    _assert_one_line_error(err)
    assert reason in err
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("option", ["--csv", "--html"])
def test_unwritable_sweep_output(capsys, tmp_path, option):
    missing_dir = tmp_path / "no" / "such" / "out.file"
    assert main(["sweep", option, str(missing_dir)]) == 1
    _, err = capsys.readouterr()
    _assert_one_line_error(err)
    assert "does not exist" in err
    assert main(["sweep", option, str(tmp_path)]) == 1          # a directory
    _, err = capsys.readouterr()
    _assert_one_line_error(err)
    assert "is a directory" in err


def test_unwritable_trace_output(capsys, tmp_path):
    assert main(["trace", "-o", str(tmp_path / "missing" / "trace.json")]) == 1
    _assert_one_line_error(capsys.readouterr().err)


# ------------------------------------------------------------------------------------- real process
def test_python_m_npu_lab_sweep_and_trace(tmp_path):
    trace = tmp_path / "trace.json"
    proc = _run_module("sweep", "--version", "v1", "--S", "128", "--tile-s", "4,8", "--csv",
                       str(tmp_path / "s.csv"))
    assert proc.returncode == 0, proc.stderr
    assert "best: tileS=" in proc.stdout and (tmp_path / "s.csv").exists()
    proc = _run_module("trace", "--version", "v3", "--S", "128", "-o", str(trace))
    assert proc.returncode == 0, proc.stderr
    assert any(e["ph"] == "X" for e in json.loads(trace.read_text())["traceEvents"])


def test_python_m_npu_lab_bad_argument_exits_nonzero_without_traceback():
    proc = _run_module("sweep", "--K", "99")
    assert proc.returncode == 2
    assert proc.stdout == ""
    _assert_one_line_error(proc.stderr)
