"""What the command line says when a user errs or stops it: each option explained, Ctrl-C in one line, a locked
run directory explained."""

from __future__ import annotations


def test_every_subcommand_says_what_its_config_option_is():
    import argparse

    from loaderbench.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    bare = [
        name
        for name, sub in commands.items()
        for action in sub._actions
        if "--config" in action.option_strings and not action.help
    ]
    assert not bare, bare


def test_ctrl_c_ends_a_command_with_one_line_and_the_sigint_status(tmp_path, monkeypatch, capsys):
    """A real SIGINT to this process while the command runs: Python's KeyboardInterrupt, said in one line, no
    traceback, exit 130 as the shell gives a command ended by SIGINT."""
    import os
    import signal
    import time

    import loaderbench.report.verdict as verdict_module
    from loaderbench.cli import main

    def interrupted(*_):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the signal lands first

    (tmp_path / "tables").mkdir()
    (tmp_path / "tables/verdict.json").write_text("[]")
    monkeypatch.setattr(verdict_module, "run_text", interrupted)
    # as a shell's foreground command has it (a background job of a non-interactive shell starts with SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main(["verdict", "--results", str(tmp_path)]) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    assert capsys.readouterr().err == "\nloaderbench verdict: interrupted\n"


def test_a_locked_directory_is_explained_by_whether_a_snakemake_runs_there(tmp_path):
    """A real process whose command line names snakemake, working in the run's directory, holds it: wait; none: the
    lock is stale and the advice is the unlock command, its path quoted."""
    import subprocess
    import sys

    from loaderbench.cli.follow import lock_advice

    root = tmp_path / "my run"
    root.mkdir()
    assert lock_advice(root) == (
        f"no Snakemake runs in {root}: a run that was killed left its lock; remove it with "
        f"`snakemake --unlock --directory '{root}'`, then run again"
    )
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "snakemake"], cwd=root)
    try:
        for _ in range(50):  # until /proc shows its command line
            if "do not --unlock" in (advice := lock_advice(root)):
                break
        assert advice == (
            f"another Snakemake (pid {proc.pid}) is running in {root}: let it finish or stop it; do not --unlock "
            "while it runs"
        )
    finally:
        proc.kill()
        proc.wait()


def test_the_time_left_follows_the_pace_the_finished_cells_kept(tmp_path):
    """Cells predicted at 10 s that take 30 s each: after the second, the time left is three times the plan's."""
    from loaderbench.cli.follow import Follower

    follow = Follower(tmp_path, {f"c{i}": 10.0 for i in range(5)}, started=0.0)
    assert follow.time_left() == 50.0  # nothing measured yet: the plan's own
    follow.pace(follow.predicted.pop("c0"), now=100.0)  # the first: its start is not known
    assert follow.time_left() == 40.0
    follow.pace(follow.predicted.pop("c1"), now=130.0)
    assert follow.time_left() == 90.0
    follow.pace(follow.predicted.pop("c2"), now=135.0)  # faster now: the pace is the mean over the cells
    assert follow.time_left() == (35.0 / 20.0) * 20.0


def test_unstage_removes_this_projects_copies_from_each_tier_and_no_other_projects(tmp_path, monkeypatch):
    """Staged copies (on /dev/shm: memory) outlive a run; `unstage` removes this project's folder on each tier of the
    config, another project's on the same tier stays."""
    import subprocess
    import sys

    import yaml

    from loaderbench.core.layout import staged_root

    mine, other, tier = tmp_path / "mine", tmp_path / "other", tmp_path / "tier"
    for project in (mine, other):
        project.mkdir()
        root = staged_root(tier, "ds", project)
        (root / "c0").mkdir(parents=True)
        (root / "c0" / "a.JPEG").write_bytes(b"x" * 1000)
    (mine / "c.yaml").write_text(yaml.safe_dump({"storage": {"disk": str(tier), "ram": str(tmp_path / "empty")}}))
    cmd = [sys.executable, "-m", "loaderbench", "unstage", "--config", "c.yaml"]
    out = subprocess.run(cmd, cwd=mine, capture_output=True, text=True, check=True).stdout.splitlines()
    gone = staged_root(tier, "ds", mine).parents[1]
    assert out == [f"disk: removed {gone} (0.0 MB)", "ram: nothing staged here"]
    assert not gone.exists() and staged_root(tier, "ds", other).is_dir()


def test_a_cell_waiting_for_the_host_is_said_on_the_terminal_once_with_its_holder(tmp_path, capsys):
    """The cell's log says every few seconds that it waits for the host lock; the quiet terminal says it once."""
    from loaderbench.cli.follow import Follower
    from loaderbench.engine.runner.hostlock import exclusive

    follower = Follower(tmp_path, {}, 0.0)
    for line in ["rule cell:", "    jobid: 5", "    wildcards: cell=opencv_ram_g1_b4_fp32_dp_r0", "    log: cell.log"]:
        follower.feed(line)
    follower.tick()
    assert capsys.readouterr().out == ""  # no log yet: nothing to say
    lines = (tmp_path / "cell.log").open("w")
    # a real wait: a holder in this process, a waiter in another, its stderr where Snakemake puts a cell's log
    with exclusive("test holder", [], directory=tmp_path / "locks"):
        import subprocess
        import sys

        code = (
            "from loaderbench.engine.runner.hostlock import exclusive, HostBusy\n"
            f"try:\n    exclusive('cell opencv', [], directory={str(tmp_path / 'locks')!r}, wait_s=1.5, report_s=0.5)"
            ".__enter__()\nexcept HostBusy:\n    pass\n"
        )
        subprocess.run([sys.executable, "-c", code], stderr=lines, check=True)
    lines.close()
    follower.tick()
    follower.tick()
    out = capsys.readouterr().out
    assert out.count("waiting for the host") == 1, out
    assert "opencv_ram_g1_b4_fp32_dp_r0: waiting for the host (cpus.lock held by pid " in out
    assert "(test holder, for " in out and "another measurement holds it" in out


def test_a_contended_cells_line_on_the_terminal_says_so(tmp_path):
    """The verdict leaves a contended cell out; its own line says it was contended, never a bare rate."""
    import json

    from loaderbench.cli.follow import cell_line
    from loaderbench.core.layout import RESULTS

    def record(warnings):
        return {
            "cell_id": "opencv_ram_g1_b4_fp32_dp_r0",
            "status": "ok",
            "metrics": {
                "samples_per_s": 51.0,
                "window": {"ci95_rel_halfwidth": 0.27},
                "data_wait_fraction": 0.04,
                "warnings": warnings,
            },
        }

    path = tmp_path / RESULTS.cell("opencv_ram_g1_b4_fp32_dp_r0")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record([{"code": "contended", "text": "other processes used 0.9 cores"}])))
    line = cell_line(tmp_path, "opencv_ram_g1_b4_fp32_dp_r0", "")
    assert line.endswith(
        "51 samples/s (+-27%), waits for data 4% of a step; CONTENDED: other processes used the CPU in its window"
    )
    path.write_text(json.dumps(record([])))
    assert cell_line(tmp_path, "opencv_ram_g1_b4_fp32_dp_r0", "").endswith("waits for data 4% of a step")
