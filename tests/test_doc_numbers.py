"""The documents' numbers are the records': every measured number README.md and docs/FINDINGS.md state (and the results
index, docs/results/README.md, in the entries SECTIONS names) carries a marker (`<!--c:ID-->`, right after it) and
tests/doc_claims.yaml says how to recompute it from the records it cites; this test recomputes each, compares at the
stated rounding, checks that the number's sentence still says what the claim is about (its subject words), and fails on
a measured number without a marker."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from tests.claims import MARKER, Claims, unmarked

CLAIMS_FILE = REPO / "tests/doc_claims.yaml"
DOCS = ["README.md", "docs/FINDINGS.md", "docs/results/README.md"]
FINDINGS_MAX_WORDS = 2000

# The results index's entries whose numbers are checked (the runs they link); the others are not checked yet.
INDEX_CHECKED = [
    "2026-12-07-h100/whatif",
    "2026-12-07-h100/whatif-classes",
    "2026-12-07-h200/whatif-b64",
    "2026-12-07-h100/whatif-b128",
    "2026-12-07-h100/whatif-b64",
    "2026-12-04-h200/models",
    "2026-12-03-h200/shards",
    "2026-12-02-h200/seed-1gpu",
    "2026-12-02-h200/harness",
    "2026-12-02-h200/peers",
]

# The parts of each document that state results (each match of its pattern): every number there is a marked claim or
# matches NOT_MEASURED.
SECTIONS = {
    "README.md": r"^## (?:The answer on one H200|Predicting the cells you did not measure)\n.*?(?=^## )",
    "docs/FINDINGS.md": r"\A.*\Z",
    "docs/results/README.md": rf"^- \[(?:{'|'.join(map(re.escape, INDEX_CHECKED))})\]\(.*?(?=^- |^\*\*|^$)",
}

# Numbers that are not measurements: settings, counts of things, names, dates, the interval's level.
NOT_MEASURED = [
    r"\b\d{4}-\d{2}-\d{2}\b",
    r"\bseed-1gpu\b",  # dates, a run's name
    r"\b\d+ x H[12]00\b",
    r"\bH[12]00\b",
    r"\b\d+-GPU\b",
    r"\b\d+ (?:to|and|or) \d+ GPUs\b",
    r"\b\d+ GPUs?\b",
    r"\b\d+ CPU cores\b",
    r"\b\d+-core\b",
    r"\b7200 rpm\b",
    r"\bMobileNetV2\b",
    r"\bResNet-(?:18|50|152)\b",
    r"\b\d+ and \d+ ranks\b",
    r"\bViT-B/16\b",
    r"\bfp32\b",
    r"\bfloat(?:16|32)\b",
    r"\bb\d+\b",
    r"\bbatch-\d+\b",
    r"\bbatch (?:sizes? )?\d+(?:(?:, \d+)* and \d+| over \d+)?\b",
    r"\bat \d+ the one pipeline\b",
    r"\bfrom 64 to 256\b",
    r"(?m)^\*\*\d+b?\. ",
    r"\bobservation \d\b",  # the seed's numbered observations
    r"\| 1 (?=\|)",  # the ceiling's AU: 1 by definition
    r"\b95%",
    r"\b\d+ (?:processes|repeats|workers|threads|DALI threads|WebDataset tar shards)\b",
    r"\bon 15 threads\b",
    r"\bwith 15\b",
    r"\b150 s a loader\b",
    r"\bexcludes 1\b",
    r"\brank 0\b",
    r"\bcard-[01]\b",
    r"\bcard [01]\b",
    r"\b1-GPU\b",
    r"\bat 1 GPU\b",
    r"\b\d+ cells in one run\b",  # a grid's size
    r"\bAll \d+ cold cells\b",
    r"\bas \d+ ranks\b",
    r"\bEfficientNet-B0\b",
    r"\b\d+ rounds\b",
    r"\b\d+ part cells\b",
]


def load_claims() -> Claims:
    return Claims(yaml.safe_load(CLAIMS_FILE.read_text()), REPO)


@pytest.fixture(scope="module")
def claims() -> Claims:
    return load_claims()


def section(doc: str) -> str:
    """The document's results sections, each in turn (the lines between them blanked, so lines keep their numbers)."""
    text = (REPO / doc).read_text()
    found = list(re.finditer(SECTIONS[doc], text, re.MULTILINE | re.DOTALL))
    assert found, f"{doc}: no section matching {SECTIONS[doc]!r}"
    if doc == "README.md":
        assert len(found) == 2, f"README.md: {len(found)} of its 2 results sections found"
    if doc == "docs/results/README.md":
        assert len(found) == len(INDEX_CHECKED), (
            f"{doc}: {len(found)} of its {len(INDEX_CHECKED)} checked entries found"
        )
    keep = [" "] * len(text)
    for m in found:
        keep[m.start() : m.end()] = text[m.start() : m.end()]
    return "".join("\n" if c == "\n" else k for c, k in zip(text, keep, strict=True))


@pytest.mark.parametrize("doc", DOCS)
def test_every_marked_number_is_what_its_records_give(claims, doc):
    seen, wrong = claims.check_document((REPO / doc).read_text(), doc)
    assert seen, f"{doc} marks no number"
    assert not wrong, f"{len(wrong)} of {len(seen)} numbers in {doc} are not what their records give:\n" + "\n".join(
        wrong
    )


@pytest.mark.parametrize("doc", DOCS)
def test_no_measured_number_without_a_marker(doc):
    rest = unmarked(section(doc), NOT_MEASURED)
    assert not rest, (
        f"{doc}: numbers in a results section with no claim marker (mark each with <!--c:ID--> and "
        "add ID to tests/doc_claims.yaml, or name the pattern in NOT_MEASURED if it is no "
        "measurement):\n" + "\n".join(rest)
    )


def test_every_claim_is_marked_in_a_document_and_cites_a_folder_it_links(claims):
    texts = {doc: (REPO / doc).read_text() for doc in DOCS}
    used = {doc: set(MARKER.findall(t)) for doc, t in texts.items()}
    stale = sorted(set(claims.claims) - set().union(*used.values()))
    assert not stale, f"claims no document marks: {stale}"
    unlinked = []
    for doc, ids in used.items():
        for cid in sorted(ids & set(claims.claims)):
            for folder in claims.sources(cid):
                run = os.path.relpath("/".join(folder.split("/")[:4]), Path(doc).parent)  # docs/results/<date>/<run>
                if run not in texts[doc]:
                    unlinked.append(f"{doc}: c:{cid} reads {folder}, which {doc} does not cite")
    assert not unlinked, "\n".join(unlinked)


def test_the_verdict_shown_is_the_one_the_quickstart_printed():
    """README's example verdict is the recorded output of that quickstart run, line for line."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"^## What you get\n.*?^```\n(.*?)^```", text, re.MULTILINE | re.DOTALL).group(1).splitlines()
    printed = (REPO / "docs/results/2026-12-06-cpu2/quickstart/terminal.txt").read_text().splitlines()
    last = next(i for i, line in enumerate(printed) if line.startswith("bundle: "))
    assert block == printed[last:]


def test_findings_stay_short():
    words = len((REPO / "docs/FINDINGS.md").read_text().split())  # as `wc -w` counts them
    assert words <= FINDINGS_MAX_WORDS, f"docs/FINDINGS.md has {words} words, over {FINDINGS_MAX_WORDS}"


def test_a_changed_or_unmarked_number_is_caught(claims):
    """The check itself: one marked number changed (in FINDINGS and in the results index), a marked interval
    dropped, and a new unmarked claim each fail."""
    doc = "docs/FINDINGS.md"
    text = (REPO / doc).read_text()
    good = "1.77x [1.67, 1.87]<!--c:seed.sc-tv-b128-->"
    assert good in text
    _, wrong = claims.check_document(text.replace(good, good.replace("1.77x", "1.79x")), doc)
    assert len(wrong) == 1 and "records give 1.77" in wrong[0], wrong
    _, wrong = claims.check_document(text.replace(good, "1.77x<!--c:seed.sc-tv-b128-->"), doc)
    assert len(wrong) == 1 and "stated without it" in wrong[0], wrong
    _, wrong = claims.check_document(text.replace("29x<!--c:seed.hdd-tv-->", "31x<!--c:seed.hdd-tv-->"), doc)
    assert len(wrong) == 1 and "records give 29" in wrong[0], wrong
    index = "docs/results/README.md"
    fp32 = "0.990 [0.969, 1.011]<!--c:seed.xc-mc-fp32-->"
    _, wrong = claims.check_document((REPO / index).read_text().replace(fp32, fp32.replace("0.990", "0.995")), index)
    assert len(wrong) == 1 and "records give 0.990" in wrong[0], wrong
    added = text.replace("(Same run.)", "(Same run; opencv at batch 256 is 2.04x torchvision.)", 1)
    assert any("2.04x" in line for line in unmarked(added, NOT_MEASURED))


def test_a_changed_what_if_score_or_its_sign_is_caught(claims):
    """The what-if's scores are recomputed with the package's own matrix: a changed median and a flipped worst error
    each fail."""
    doc = "docs/FINDINGS.md"
    text = (REPO / doc).read_text()
    median, worst = "2.1%<!--c:whatif.h100-loader-->", "+8.7%<!--c:whatif.h100-worst-->"
    assert median in text and worst in text
    _, wrong = claims.check_document(text.replace(median, median.replace("2.1%", "2.3%")), doc)
    assert len(wrong) == 1 and "records give 2.1" in wrong[0], wrong
    _, wrong = claims.check_document(text.replace(worst, worst.replace("+8.7%", "-8.7%")), doc)
    assert len(wrong) == 1 and "records give +8.7" in wrong[0], wrong


def test_a_loosened_or_broken_bound_is_caught(claims):
    """A bound holds only as tight as it is written: loosening "within 2%" to 5%, "about 100" to 104 or ">= 95%" to
    90% fails, as does a bound the records break; the bounds as written pass."""
    cases = {
        "README.md": [
            ("within 2%<!--c:seed.spread-ceiling-dali-fp32-->", "within 5%", "records give 1.612, not within 5"),
            ("within 2%<!--c:seed.spread-ceiling-dali-fp32-->", "within 1%", "records give 1.612, not within 1"),
            ("about 100<!--c:seed.hdd-about-->", "about 104", "records give 99.51, not about 104"),
        ],
        "docs/FINDINGS.md": [
            (">= 95%<!--c:seed.cold-share-->", ">= 90%", "records give 95.81, not >= 90"),
            ("within 22<!--c:x2.commit-minutes-->", "within 30", "records give 21.14, not within 30"),
        ],
    }
    for doc, edits in cases.items():
        text = (REPO / doc).read_text()
        for good, loose, why in edits:
            assert good in text, (doc, good)
            cid = MARKER.search(good).group(1)
            _, wrong = claims.check_document(text.replace(good, f"{loose}<!--c:{cid}-->"), doc)
            assert len(wrong) == 1 and why in wrong[0], (doc, loose, wrong)
        _, wrong = claims.check_document(text, doc)
        assert not wrong, wrong


def test_every_claim_names_its_subject(claims):
    """Each claim declares the words its sentence must say in each document that marks it (its loader, tier,
    direction, run): a number is checked against what the sentence says it is about, not only against its value."""
    bare = sorted(
        f"{doc}: {cid}"
        for doc in DOCS
        for cid in set(MARKER.findall((REPO / doc).read_text()))
        if not claims.subject(cid, doc)
    )
    assert not bare, f"claims with no subject words in {CLAIMS_FILE.name} for a document that marks them: {bare}"


# (document, the text as written, the text edited, the claim whose subject word the edit changes, that word)
SUBJECT_EDITS = {
    "a direction": (
        "README.md",
        "29-58x<!--c:seed.hdd-all--> faster",
        "29-58x<!--c:seed.hdd-all--> slower",
        "seed.hdd-all",
        "faster",
    ),
    "a loader": ("README.md", "dali-sc\n  52.7x", "dali-mc\n  52.7x", "seed.hdd-sc-b256", "dali-sc"),
    "a loader in FINDINGS": ("docs/FINDINGS.md", "and dali-sc 2.52x", "and dali-mc 2.52x", "seed.sc-tv-amp", "dali-sc"),
    "a table's row": ("README.md", "| dali-sc | 5289", "| dali-mc | 5289", "seed.sc-local-b256", "dali-sc"),
    "the order of a comparison": (
        "docs/FINDINGS.md",
        "where dali-cpu over dali-sc is",
        "where dali-sc over dali-cpu is",
        "seed.cpu-sc-amp",
        "dali-cpu over dali-sc",
    ),
    "who led": (
        "docs/FINDINGS.md",
        "Under DDP\nmulti-card led:",
        "Under DDP\nsingle-card led:",
        "x2.o6-ddp",
        "multi-card led",
    ),
    "a loader in the index": (
        "docs/results/README.md",
        "dali-mc 1.011",
        "dali-sc 1.011",
        "seed.xc-mc-amp",
        "dali-mc",
    ),
    "the host": ("docs/FINDINGS.md", "One H100:\n", "One H200:\n", "whatif.h100-loader", "H100"),
}


@pytest.mark.parametrize("what", SUBJECT_EDITS)
def test_a_changed_subject_word_is_caught(claims, what):
    """Changing what a number is about (faster to slower, dali-sc to dali-mc, one host to another) fails the check,
    though every number still reads as its records give it; the message names the claim and the missing word."""
    doc, written, edited, cid, word = SUBJECT_EDITS[what]
    text = (REPO / doc).read_text()
    assert text.count(written) == 1, (doc, written)
    _, wrong = claims.check_document(text.replace(written, edited), doc)
    assert wrong and all("its sentence does not say" in w for w in wrong), wrong
    assert any(f"<!--c:{cid}-->: its sentence does not say {word!r}" in w for w in wrong), wrong


# (document, the text as written, the same with a typo): an edit outside every subject word
TYPO_EDITS = [
    ("README.md", "(HDD windows too short for an interval)", "(HDD windows to short for an interval)"),
    (
        "docs/FINDINGS.md",
        "dali-sc 2.52x [2.20, 2.89]<!--c:seed.sc-tv-amp--> (same run)",
        "dali-sc 2.52x [2.20, 2.89]<!--c:seed.sc-tv-amp--> (same rnu)",
    ),
    (
        "docs/FINDINGS.md",
        "1.40x [1.29, 1.51]<!--c:x2.o6-ddp--> (dali-sc's rank 0",
        "1.40x [1.29, 1.51]<!--c:x2.o6-ddp--> (dali-sc's rank O",
    ),
]


@pytest.mark.parametrize(("doc", "written", "typo"), TYPO_EDITS)
def test_an_edit_outside_the_subject_words_passes(claims, doc, written, typo):
    """A typo made in a sentence's other words changes nothing the check reads (nor does its fix: the document as
    written passes)."""
    text = (REPO / doc).read_text()
    assert text.count(written) == 1, (doc, written)
    _, wrong = claims.check_document(text.replace(written, typo), doc)
    assert not wrong, wrong


def test_a_group_statement_reads_the_runs_own_labels():
    """A group statement ("on an HDD the disk is the limit", "the fix for a CPU-bound loader") holds only while the
    run's committed diagnosis.csv labels those cells so: a cell labelled otherwise fails the claims that group by it,
    naming the cell."""
    fresh = load_claims()
    seed = fresh.runs["seed"]
    assert seed.label("torchvision/hdd/b128") == "I/O-bound"
    assert seed.label("torchvision/ram/b256/amp") == "CPU-prep-bound"
    seed.labels["torchvision/hdd/g1/b128/fp32/dp"] = "CPU-prep-bound"
    seed.labels["torchvision/ram/g1/b256/amp/dp"] = "transfer-bound"
    for doc, cids in {
        "README.md": {"seed.hdd-about", "seed.hdd-wait", "seed.cpu-tv-amp"},
        "docs/FINDINGS.md": {"seed.hdd-about", "seed.hdd-rates", "seed.hdd-wait", "seed.cpu-tv-amp", "seed.sc-tv-amp"},
    }.items():
        _, wrong = fresh.check_document((REPO / doc).read_text(), doc)
        failed = {MARKER.search(w).group(1) for w in wrong}
        assert failed == cids, (doc, wrong)
        assert all("torchvision/hdd/g1/b128/fp32/dp" in w or "torchvision/ram/g1/b256/amp/dp" in w for w in wrong)
