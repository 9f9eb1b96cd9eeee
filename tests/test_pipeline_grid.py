"""One finished run of the tiny grid (the session's `finished_run`): its table, its cell records, the staged copies,
the bundle (also as headless Chromium renders it) and Snakemake's report."""

from __future__ import annotations

import html
import zipfile
from pathlib import Path

import pytest
import yaml

from loaderbench.core.cells import cell_ids
from loaderbench.core.config import validate_config
from loaderbench.core.records import validate_record
from loaderbench.report.figure_list import FIGURES, read_index
from tests.conftest import cell_record, cells_table, snakemake

pytestmark = pytest.mark.e2e
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
needs_chromium = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="Debian's chromium and chromium-driver are not installed (.ci/run installs them)",
)


@pytest.fixture(scope="module")
def table(finished_run):
    work, _ = finished_run
    return cells_table(work)


@pytest.fixture(scope="module")
def index(finished_run) -> str:
    """The bundle's index.html."""
    work, _ = finished_run
    return (work / "results/bundle/index.html").read_text()


def test_the_table_starts_with_the_nine_headline_columns_in_order(table):
    assert list(table.columns[:9]) == [
        "Dataloader",
        "Disk",
        "GPU",
        "Batch size",
        "Time(s)",
        "Steps",
        "Samples/s",
        "Speed",
        "GPU Efficiency",
    ]


def test_the_table_has_one_ok_row_with_a_positive_rate_for_each_of_the_10_cells(table):
    assert len(table) == 10 and set(table["Status"]) == {"ok"} and (table["Samples/s"] > 0).all()


def test_the_table_covers_every_loader_tier_and_precision_with_the_configured_steps(table):
    assert set(table["Dataloader"]) == {"torchvision", "opencv", "synthetic"}
    assert set(table["Disk"]) == {"disk-a", "disk-b"}
    assert set(table["Precision"]) == {"fp32", "amp"} and (table["Steps"] == 3).all()


def test_the_baseline_cell_has_speed_1(table):
    base = table[(table["Dataloader"] == "torchvision") & (table["Disk"] == "disk-a") & (table["Precision"] == "fp32")]
    assert float(base["Speed"].iloc[0]) == pytest.approx(1.0)


def test_every_cell_of_the_config_has_a_valid_ok_record_naming_its_cell(finished_run):
    work, cfg_path = finished_run
    for cid in cell_ids(validate_config(yaml.safe_load(cfg_path.read_text()))):
        rec = cell_record(work, cid)
        validate_record(rec)
        assert rec["status"] == "ok" and rec["cell_id"] == cid
        # forked by the run's warm-start server (host.warm_start, on by default), not started as a new Python
        assert [s["warm"] for s in rec["process_start"]] == [True], rec["process_start"]


def test_every_cold_tier_cell_is_kept_cold_and_says_how_much_came_from_the_device(finished_run):
    """A cold path tier is evicted again and again while its cell reads (so a second pass reads the device too), and
    the record gives the share of the window's bytes the device delivered - or why it cannot."""
    work, cfg_path = finished_run
    cold = [
        r
        for r in (cell_record(work, c) for c in cell_ids(validate_config(yaml.safe_load(cfg_path.read_text()))))
        if r["tier"]["cache"] == "cold" and r["tier"]["kind"] == "path" and r["spec"]["loader"] != "synthetic"
    ]
    assert cold
    for r in cold:
        assert r["tier"]["keep_cold"]["sweeps"] >= 1 and r["tier"]["keep_cold"]["files"] > 0
        share = r["tier"]["device_read_share"]
        assert (share is not None and 0 <= share <= 1) or r["tier"]["device_read_note"]


def test_every_record_of_one_run_names_that_run_and_the_machines_boot(finished_run):
    """One Snakemake invocation is one run: its cells share a run id (tables divide only within a run), and each
    names the boot of the machine it ran on (host names can repeat across machines)."""
    work, cfg_path = finished_run
    recs = [cell_record(work, cid) for cid in cell_ids(validate_config(yaml.safe_load(cfg_path.read_text())))]
    runs = {r["provenance"]["run_id"] for r in recs}
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert len(runs) == 1 and None not in runs and {r["provenance"]["host"]["boot_id"] for r in recs} == {boot}


def test_staged_copies_live_inside_each_tier_in_the_folder_staging_owns(finished_run):
    work, _ = finished_run
    for tier in ("tier-a", "tier-b"):
        assert len(list((work / tier / "loaderbench").rglob("*.JPEG"))) == 32


def test_the_bundle_index_links_every_figure_as_png_and_svg_and_the_bundle_holds_them(finished_run, index):
    """Each figure the grid can draw is linked and held; each other one (no loader alone here: neither the model
    figures nor the what-if matrix, whose parts are missing) is named with its reason, and no file stands in for it."""
    work, _ = finished_run
    figures = read_index(work / "results/bundle/figures")
    assert set(figures["not_drawn"]) == {"loader_alone", "predicted", "whatif_matrix"}, figures
    assert figures["drawn"] == [name for name in FIGURES if name not in figures["not_drawn"]]
    for name in figures["drawn"]:
        for ext in ("png", "svg"):
            assert f"figures/{name}.{ext}" in index
            assert (work / "results/bundle/figures" / f"{name}.{ext}").stat().st_size > 1000
    for name, why in figures["not_drawn"].items():
        assert f"<li><b>{name.replace('_', ' ')}</b>: {html.escape(why)}</li>" in index
        assert not list((work / "results/bundle/figures").glob(f"{name}.*"))


def test_the_bundle_index_links_the_tables_provenance_config_and_dataset_check_and_the_bundle_holds_them(
    finished_run, index
):
    work, _ = finished_run
    for link in ("tables/cells.csv", "tables/repeats.csv", "provenance.json", "config.json", "dataset_check.txt"):
        assert link in index and (work / "results/bundle" / link).is_file()


def test_the_bundle_zip_holds_the_index_and_the_figures(finished_run):
    work, _ = finished_run
    with zipfile.ZipFile(work / "results/bundle.zip") as z:
        names = set(z.namelist())
    assert "bundle/index.html" in names and "bundle/figures/throughput.png" in names


@pytest.fixture(scope="module")
def rendered(finished_run, tmp_path_factory) -> dict:
    """The bundle's index.html as headless Chromium loads it: its images, its links, the browser's severe log entries
    and a screenshot."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    work, _ = finished_run
    profile = tmp_path_factory.mktemp("chromium")
    opts = Options()
    opts.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,2000",
        f"--user-data-dir={profile / 'profile'}",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    try:
        driver.get((work / "results/bundle/index.html").as_uri())
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])"
        )
        links = driver.execute_script("return Array.from(document.links).map(a => a.getAttribute('href'))")
        first = driver.execute_script(
            "const h = document.querySelector('h2'), t = document.querySelector('h2 + p + table');"
            "return [h.textContent, t ? t.getBoundingClientRect().bottom : null, window.innerHeight]"
        )
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        shot = profile / "index.png"
        driver.save_screenshot(str(shot))
    finally:
        driver.quit()
    return {"images": images, "links": links, "errors": errors, "screenshot": shot, "first": first, "work": work}


@needs_chromium
def test_chromium_shows_every_figure_of_the_bundle_as_png(rendered):
    drawn = read_index(rendered["work"] / "results/bundle/figures")["drawn"]
    assert {src for src, *_ in rendered["images"]} == {f"figures/{name}.png" for name in drawn}


@needs_chromium
def test_every_image_of_the_bundle_index_loads_in_chromium(rendered):
    broken = [src for src, complete, width in rendered["images"] if not complete or width == 0]
    assert not broken, f"images that did not load: {broken}"


@needs_chromium
def test_every_link_of_the_bundle_index_resolves_to_a_file_of_the_bundle(finished_run, rendered):
    work, _ = finished_run
    missing = [h for h in rendered["links"] if not (work / "results/bundle" / h.split("#")[0]).is_file()]
    assert rendered["links"] and not missing, f"links that do not resolve: {missing}"


@needs_chromium
def test_the_bundle_opens_on_the_verdict_whole_on_the_first_screen(rendered):
    heading, table_bottom, screen = rendered["first"]
    assert heading.startswith("Verdict") and table_bottom is not None and table_bottom <= screen


def test_the_verdict_is_printed_in_at_most_12_lines_and_matches_the_bundles(finished_run, index):
    import json
    import subprocess
    import sys

    work, _ = finished_run
    out = subprocess.run(
        [sys.executable, "-m", "loaderbench", "verdict", "--results", str(work / "results")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    verdict = json.loads((work / "results/tables/verdict.json").read_text())
    assert 2 <= len(out) <= 12 and out[0].startswith("verdict")
    for v in verdict:  # each (device, tier) of the run, its reference's bottleneck in both; no GPU here: the CPU
        assert v["device"] == "cpu" and "GPU," not in "\n".join(out)
        assert f"CPU, {v['tier']}: {v['reference']['what']} is {v['reference']['bottleneck']}" in "\n".join(out)
        assert f"<b>{v['reference']['bottleneck']}</b>" in index
    assert index.index("Verdict") < index.index("Table (the seed")


@needs_chromium
def test_chromium_logs_no_severe_error_on_the_bundle_index(rendered):
    assert not rendered["errors"], rendered["errors"]


@needs_chromium
def test_the_bundle_index_renders_in_headless_chromium_as_a_full_page_not_a_blank_one(rendered):
    from PIL import Image, ImageStat

    with Image.open(rendered["screenshot"]) as im:  # a page-sized screenshot with text and figures
        assert im.width >= 1000 and ImageStat.Stat(im.convert("L")).stddev[0] > 20


def test_snakemake_report_has_the_figures(finished_run):
    work, cfg_path = finished_run
    snakemake(work, "--configfile", str(cfg_path), "--report", "results/report.html")
    report = work / "results/report.html"
    assert report.is_file() and report.stat().st_size > 10_000
