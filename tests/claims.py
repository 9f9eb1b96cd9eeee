"""The numbers the documents state about measurements, recomputed from the records they cite.

A measured number in README.md, docs/FINDINGS.md or docs/results/README.md carries an invisible marker right after it,
attached without a space (so it adds no word): `57.5x<!--c:seed.hdd-opencv-b256-->`,
`1.77x [1.67, 1.87]<!--c:seed.sc-tv-b128-->`. A claims file (tests/doc_claims.yaml) names, for each marker's id, what to
compute: `expr`, a Python expression over the runs it declares (`runs:` alias -> a folder of cell records, optionally
one code commit of it) and the helpers below. `check_document` reads the number stated before each marker, recomputes it
and compares at the stated rounding (a bound, "within 2%" or ">= 95%", and an "about 100" only as tight as they are
written: one unit of the last digit); `unmarked` lists the numbers of a text that carry no marker and match no allowed
(non-measurement) pattern. A claim's `subject` words (its loader, direction, run) must stand in the sentence of each of
its markers (`sentence_at`).

The tables come from the package's own code: records read with `records.read_record`, tabulated with
`aggregate.repeats_table` and `aggregate.cells_table` (a cell's median and the interval `uncertainty` gives it); a
comparison of two cells is `uncertainty.quotient` of them, as the recommendations compute it; a crosscheck's cell/bare
is `uncertainty.ratio` over its rounds; a run's what-if scores are `whatif.matrix` of its records, as `loaderbench
predict` prints them.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from loaderbench.core.comparable import SEVERAL
from loaderbench.core.records import read_record
from loaderbench.core.registry import DEFAULT_MODEL
from loaderbench.core.uncertainty import Ratio, quotient, ratio
from loaderbench.report.aggregate import add_tier_rates, cells_table, repeats_table
from loaderbench.whatif.predictions import matrix

MARKER = re.compile(r"(?<!`)<!--c:([A-Za-z0-9_.\-]+)-->")  # not one quoted in a code span
NUM = r"\d[\d,]*(?:\.\d+)?"
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)  # a marker, or any other comment of the Markdown


@dataclass(frozen=True)
class Value:
    """A computed number and, where it has one, its relative 95% half-width (NaN: none); `comparison`: a ratio of
    two measurements (which the documents state with its interval)."""

    value: float
    halfwidth: float = math.nan
    comparison: bool = False

    @property
    def low(self) -> float:
        return self.value / (1 + self.halfwidth)

    @property
    def high(self) -> float:
        return self.value * (1 + self.halfwidth)

    @property
    def has_interval(self) -> bool:
        return not math.isnan(self.halfwidth)

    @classmethod
    def of(cls, x) -> Value:
        if isinstance(x, Value):
            return x
        if isinstance(x, Ratio):
            return cls(x.value, x.halfwidth, comparison=True)
        return cls(float(x))

    def __truediv__(self, other) -> Value:
        """a / b with the interval of two independent measurements (`uncertainty.quotient`)."""
        other = Value.of(other)
        q = quotient(self.value, _hw(self.halfwidth), other.value, _hw(other.halfwidth))
        known = self.has_interval and other.has_interval
        return Value(q.value, q.halfwidth if known else math.nan, comparison=True)

    def __mul__(self, k: float) -> Value:
        return Value(self.value * k, self.halfwidth, self.comparison)

    __rmul__ = __mul__

    def __float__(self) -> float:
        return self.value


def _hw(h: float) -> float:
    return 0.0 if math.isnan(h) else h


@dataclass(frozen=True)
class Span:
    """The lowest and the highest of several values: a stated range "98-100"."""

    lo: float
    hi: float

    def __mul__(self, k: float) -> Span:
        return Span(self.lo * k, self.hi * k)

    __rmul__ = __mul__


def span(values) -> Span:
    vals = [float(Value.of(v).value) for v in values]
    if not vals:
        raise ValueError("span of no values")
    return Span(min(vals), max(vals))


def pct(x):
    """A share as a percentage (a fraction x 100), for a number, a Value or a Span."""
    return x * 100 if isinstance(x, (Value, Span)) else 100 * float(x)


KEYS = ("loader", "tier", "gpus", "batch_size", "precision", "parallel", "model")
SPEC_DEFAULTS = {"parallel": "dp", "model": DEFAULT_MODEL}  # what a record made before these keys measured


def parse_cell(sel: str) -> tuple:
    """The keys of a cell named like "dali-mc/ram/g2/b256/amp/ddp" (KEYS' order); after loader/tier the parts come
    in any order, and g1, fp32, dp and MobileNetV2 are the defaults ("opencv/local/b128" is
    opencv/local/g1/b128/fp32/dp); a part `model=NAME` names another model ("torchvision/ram/b256/model=resnet50")."""
    loader, tier, *rest = sel.split("/")
    gpus, batch, precision, parallel, model = 1, None, "fp32", "dp", DEFAULT_MODEL
    for part in rest:
        if re.fullmatch(r"g\d+", part):
            gpus = int(part[1:])
        elif re.fullmatch(r"b\d+", part):
            batch = int(part[1:])
        elif part in ("fp32", "amp"):
            precision = part
        elif part in ("dp", "ddp"):
            parallel = part
        elif re.fullmatch(r"model=[a-z0-9_-]+", part):
            model = part.removeprefix("model=")
        else:
            raise ValueError(f"cell {sel!r}: cannot read {part!r}")
    if batch is None:
        raise ValueError(f"cell {sel!r}: no batch size (bN)")
    return loader, tier, gpus, batch, precision, parallel, model


def cell_name(row) -> str:
    """The row's cell as `parse_cell` reads it (its model named where it is not MobileNetV2)."""
    model = row.get("model", DEFAULT_MODEL)
    name = f"{row['loader']}/{row['tier']}/g{row['gpus']}/b{row['batch_size']}/{row['precision']}/{row['parallel']}"
    return name if model == DEFAULT_MODEL else f"{name}/model={model}"


class Run:
    """The records of one run: a folder of cell records, optionally only those of one code commit (records made
    before runs were named carry no run or boot id; one commit of a study's bundle is then the run)."""

    def __init__(
        self,
        records: str | Path | list,
        commit: str | None = None,
        root: Path = Path("."),
        probes: str | Path | None = None,
    ):
        self.folders = [Path(f) for f in (records if isinstance(records, list) else [records])]
        self.folder = self.folders[0]
        self.commit = commit
        self.root = Path(root)
        self.probes = Path(probes) if probes else None  # the run's tier probes: each cell's image MB/s and its tier's

    @cached_property
    def records(self) -> list[dict]:
        files = sorted(p for f in self.folders for p in self.root.glob(f"{f}/*.json"))  # a folder may be a glob
        if not files:
            raise FileNotFoundError(f"no cell records in {self.folder}")
        records = [read_record(p) for p in files]
        if self.commit:
            records = [
                r
                for r in records
                if str(((r.get("provenance") or {}).get("git") or {}).get("commit") or "").startswith(self.commit)
            ]
            if not records:
                raise ValueError(f"no record of commit {self.commit} in {self.folder}")
        return records

    @cached_property
    def table(self) -> pd.DataFrame:
        ids = [r["cell_id"] for r in self.records]
        if len(ids) != len(set(ids)):
            raise ValueError(f"{self.folders}: a cell id recurs (records of several settings): no one table")
        reps = repeats_table(self.records)
        t = cells_table(reps, {"loader": None, "tier": None, "gpus": 0, "batch_size": 0, "precision": None})
        if self.probes:
            from loaderbench.data.tierprobe import tier_rates

            probes = [json.loads(p.read_text()) for p in sorted((self.root / self.probes).glob("*.json"))]
            add_tier_rates(t, tier_rates(probes))
        groups = set(t["compare_group"])
        if len(groups) != 1 or any(str(g).startswith(SEVERAL) for g in groups):
            raise ValueError(f"{self.folder}: the records do not compare (core.comparable): {sorted(map(str, groups))}")
        return t

    def row(self, sel: str) -> pd.Series:
        key = parse_cell(sel)
        t = self.table
        hit = t[np.logical_and.reduce([t[k] == v for k, v in zip(KEYS, key, strict=True)])]
        if len(hit) != 1:
            raise KeyError(f"{self.folder}: {len(hit)} cells match {sel!r}")
        return hit.iloc[0]

    def rate(self, sel: str) -> Value:
        """The cell's Samples/s (median over its repeats) with its interval, as `tables/cells.csv` gives them."""
        r = self.row(sel)
        hw = r["halfwidth"]
        return Value(float(r["samples_per_s"]), float(hw) if pd.notna(hw) else math.nan)

    def ratio(self, a: str, b: str) -> Value:
        """Cell a's rate over cell b's, with the interval of two independent measurements."""
        return self.rate(a) / self.rate(b)

    def ceiling(self, sel: str) -> str:
        """The synthetic cell of the same model, GPUs, batch, precision and parallel mode (the fastest, where several)."""
        _, _, g, b, p, par, model = parse_cell(sel)
        t = self.table
        syn = t[
            (t["loader"] == "synthetic")
            & (t["model"] == model)
            & (t["gpus"] == g)
            & (t["batch_size"] == b)
            & (t["precision"] == p)
            & (t["parallel"] == par)
        ]
        if syn.empty:
            raise KeyError(f"{self.folder}: no synthetic cell for {sel!r}")
        return cell_name(syn.loc[syn["samples_per_s"].idxmax()])

    def au(self, sel: str) -> Value:
        """AU: the cell's rate over the compute ceiling's (`aggregate.accelerator_utilisation`), with its interval."""
        return self.ratio(sel, self.ceiling(sel))

    def col(self, sel: str, name: str) -> float:
        """A column of the cell's row in `tables/cells.csv` (data_wait_fraction, device_read_share, ...)."""
        return float(self.row(sel)[name])

    def select(self, **want) -> list[str]:
        """The cells whose keys match: each keyword a value or a tuple of values (loader=("dali-sc", "dali-mc"))."""
        t = self.table
        keep = np.ones(len(t), dtype=bool)
        for k, v in want.items():
            keep &= t[k].isin(v if isinstance(v, (tuple, list, set)) else [v]).to_numpy()
        out = [cell_name(r) for _, r in t[keep].iterrows()]
        if not out:
            raise KeyError(f"{self.folder}: no cell matches {want}")
        return out

    @cached_property
    def labels(self) -> dict[str, str]:
        """Each cell's bottleneck as the run labelled it: the Bottleneck column of the folder's committed
        `tables/diagnosis.csv` (beside the records folder), by cell name."""
        path = self.root / self.folder.parent / "tables/diagnosis.csv"
        if not path.is_file():
            raise FileNotFoundError(f"{self.folder}: no committed diagnosis ({path.relative_to(self.root)})")
        d = pd.read_csv(path)
        cols = {"Dataloader": "loader", "Model": "model", "Disk": "tier", "GPU": "gpus", "Batch size": "batch_size"}
        d = d.rename(columns={**cols, "Precision": "precision", "Parallel": "parallel"})
        if "model" not in d:
            d["model"] = DEFAULT_MODEL
        return {cell_name(r): str(r["Bottleneck"]) for _, r in d.iterrows()}

    def label(self, sel: str) -> str:
        """The cell's bottleneck label in the run's diagnosis.csv (GPU-bound, CPU-prep-bound, I/O-bound, ...)."""
        name = cell_name(dict(zip(KEYS, parse_cell(sel), strict=True)))
        if name not in self.labels:
            raise KeyError(f"{self.folder}: {sel!r} has no row in the run's diagnosis.csv")
        return self.labels[name]

    def labelled(self, label: str, **want) -> list[str]:
        """The cells the run labelled `label` in its diagnosis.csv, of those whose keys match `want` (as `select`):
        a statement about "the GPU-bound cells" reads the run's own labels, not a list of loaders."""
        out = [c for c in self.select(**want) if self.label(c) == label]
        if not out:
            raise KeyError(f"{self.folder}: no cell {want or ''} labelled {label!r} in its diagnosis.csv")
        return out

    def all_labelled(self, label: str, **want) -> list[str]:
        """The cells whose keys match `want`, each of which the run labelled `label` (a statement about all of them:
        "on an HDD the disk is the limit"); a cell labelled otherwise is an error that names it and its label."""
        cells = self.select(**want)
        other = {c: self.label(c) for c in cells if self.label(c) != label}
        if other:
            raise ValueError(f"{self.folder}: not every cell {want} is {label} in its diagnosis.csv: {other}")
        return cells

    def raw(self, sel: str) -> list[dict]:
        """The records of the cell (every repeat), for what the tables do not carry."""
        key = parse_cell(sel)
        out = [
            r
            for r in self.records
            if tuple(r["spec"].get(k, SPEC_DEFAULTS.get(k)) for k in KEYS) == key and r["status"] == "ok"
        ]
        if not out:
            raise KeyError(f"{self.folder}: no ok record of {sel!r}")
        return out

    def rates(self, sel: str) -> list[float]:
        """The Samples/s of each of the cell's processes."""
        return [r["metrics"]["samples_per_s"] for r in self.raw(sel)]

    def each(self, sel: str, name: str) -> list[float]:
        """A column of `tables/repeats.csv` (gpu_util_pct, data_wait_fraction, ...) for each of the cell's processes."""
        reps = repeats_table(self.raw(sel))
        return [float(x) for x in reps[name]]

    def whatif(self, *gpus: int) -> WhatIf:
        """The what-if scores of the run's records at these GPU counts (default 1), as `loaderbench predict --records
        FOLDER --gpus ...` prints them: `whatif.matrix` and the scores it holds."""
        key = tuple(gpus or (1,))
        cache = self.__dict__.setdefault("_whatif", {})
        if key not in cache:
            cache[key] = WhatIf(matrix(self.records, gpus=key))
        return cache[key]


class WhatIf:
    """The scores of a what-if matrix (`whatif.scoring`) as the documents state them: each a percentage (a share x
    100) or a count. `klass` is a class of `whatif.terms.CLASSES` (loader, gpu-shared, model, consuming process) or
    `all`; a class with no check has no score (KeyError)."""

    def __init__(self, df: pd.DataFrame):
        self.df = df
        self.by_class = {r["class"]: r for r in df.attrs["scores"]}
        self.cov = df.attrs["coverage"]

    def _row(self, klass: str) -> dict:
        if klass not in self.by_class:
            raise KeyError(f"no check of class {klass!r} (the classes scored: {sorted(self.by_class)})")
        return self.by_class[klass]

    def checks(self, klass: str = "all") -> int:
        """How many checks (measured rows) the class has."""
        return int(self._row(klass)["checks"])

    def median(self, klass: str = "all") -> float:
        """The class's median |error| in percent."""
        return pct(self._row(klass)["median_abs_error"])

    def naive(self, klass: str = "all") -> float:
        """The naive min(loader alone, ceiling)'s median |error| on the class's checks, in percent."""
        return pct(self._row(klass)["naive_median_abs_error"])

    def worst(self, klass: str = "all") -> float:
        """The class's worst check's error (measured / predicted - 1), signed, in percent."""
        return pct(self._row(klass)["worst_error"])

    def worst_cell(self, klass: str = "all") -> str:
        return str(self._row(klass)["worst_cell"])

    def inside(self) -> int:
        """How many checks were measured inside their interval."""
        return int(self.cov["inside"])

    def width(self) -> float:
        """The median relative width (hi - lo) / predicted of the checks' intervals, in percent."""
        return pct(self.cov["width_checks"])

    def model(self, name: str) -> float:
        """One model's median |error| over its checks, in percent."""
        return pct(self.df.attrs["model_spread"][name])

    def spread(self) -> float:
        """The largest per-model median |error| less the smallest, in percentage points."""
        return pct(self.df.attrs["spread"])


def read_json(path: str | Path, root: Path = Path(".")):
    return json.loads((Path(root) / path).read_text())


def crosscheck(
    path: str | Path, loader: str, precision: str, root: Path = Path("."), model: str | None = None
) -> Value:
    """cell/bare of one row of a `loaderbench crosscheck` result, recomputed from its rounds (`uncertainty.ratio`);
    `model` picks among rows of several models (a row that names none trained the default)."""
    rows = [
        r
        for r in read_json(path, root)["rows"]
        if r["loader"] == loader
        and r["precision"] == precision
        and (model is None or (r.get("model") or DEFAULT_MODEL) == model)
    ]
    if len(rows) != 1 or rows[0].get("status") != "ok":
        raise KeyError(f"{path}: no ok row {loader}/{precision}" + (f"/{model}" if model else ""))
    r = rows[0]
    pairs = list(
        zip(r["cell_samples_per_s"], r["bare_samples_per_s"], r["cell_halfwidth"], r["bare_halfwidth"], strict=True)
    )
    q = ratio(pairs)
    return Value(q.value, q.halfwidth, comparison=True)


# --- what a document states ----------------------------------------------------------------------------------------

# What may stand right before a marker, longest forms first; a unit (x or %) may follow each number.
STATED = [
    ("interval", re.compile(rf"(?P<v>{NUM})x?\s*\[(?P<lo>{NUM}),\s*(?P<hi>{NUM})\]$")),
    ("halfwidth", re.compile(rf"(?P<v>{NUM})\s*[\[(]\+-(?P<hw>{NUM})%[\])]$")),
    ("bound", re.compile(rf"(?P<op>>=|<=|<|>|under |over |within )\s*(?P<v>{NUM})(?:x|%)?$")),
    ("about", re.compile(rf"(?<![\w])about\s+(?P<v>{NUM})(?:x|%)?$")),
    ("range", re.compile(rf"(?<![\w.-])(?P<lo>{NUM})(?:x|%)?-(?P<hi>{NUM})(?:x|%)?$")),
    ("signed", re.compile(rf"(?:(?<=[\s(])|^)(?P<sign>[+-])(?P<v>{NUM})(?:x|%)?$")),
    ("number", re.compile(rf"(?<![\w.])(?P<v>{NUM})(?:x|%)?$")),
]


@dataclass(frozen=True)
class Stated:
    kind: str
    text: str  # the stated number as written, e.g. "1.77x [1.67, 1.87]"
    start: int  # where it starts in the document
    parts: dict


def stated_before(doc: str, end: int) -> Stated:
    """The number the document states right before position `end` (a marker's start)."""
    # earlier markers blanked (their "-->" is no ">"), the positions kept
    near = COMMENT.sub(lambda m: " " * len(m.group(0)), doc[max(0, end - 400) : end])
    before = near[-80:]
    for kind, rx in STATED:
        m = rx.search(before)
        if m:
            return Stated(kind, m.group(0), end - len(before) + m.start(), m.groupdict())
    raise ValueError(f"no number right before the marker: ...{before[-40:]!r}")


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def _decimals(s: str) -> int:
    return len(s.split(".")[1]) if "." in s else 0


def _step(written: str, unit: float | None) -> float:
    """One unit of the written number's last digit (or the claim's stated unit: round: 10)."""
    return unit if unit else 10.0 ** -_decimals(written)


def _agrees(written: str, computed: float, unit: float | None) -> bool:
    """Whether `computed` reads as `written` at the rounding it is written to (or a stated unit: round: 10)."""
    w = _num(written)
    if math.isnan(computed):
        return False
    return abs(computed - w) <= _step(written, unit) / 2 * (1 + 1e-9) + 1e-12


# A bound is as tight as it is written: an upper bound B holds a value at most B and above B less one unit of B's last
# digit ("within 2%": (1, 2]), a lower bound one at least B and below B plus that unit (">= 95%": [95, 96)).
UPPER = {"within": False, "<=": False, "under": True, "<": True}  # the operator and whether it is strict
LOWER = {">=": False, "over": True, ">": True}


def _bound_holds(op: str, written: str, value: float, unit: float | None) -> bool:
    w, step = _num(written), _step(written, unit)
    eps = step * 1e-9
    if op in UPPER:
        return (value < w if UPPER[op] else value <= w + eps) and value > w - step - eps
    return (value > w if LOWER[op] else value >= w - eps) and value < w + step + eps


def _fmt(x: float, like: str) -> str:
    return f"{x:.{max(_decimals(like), 0)}f}" if not math.isnan(x) else "nan"


def compare(s: Stated, computed, unit: float | None = None) -> str | None:
    """None when the stated number is what `computed` gives, else what the records give instead (a comparison with
    an interval stated without it is wrong too: every comparison carries its interval; a bound or an "about V" holds
    only as tight as it is written: see `_bound_holds`, and "about V" within one unit of V's last digit)."""
    p = s.parts
    if s.kind == "range":
        got = computed if isinstance(computed, Span) else None
        if got is None:
            return f"states a range, the claim computes {type(computed).__name__}"
        ok = _agrees(p["lo"], got.lo, unit) and _agrees(p["hi"], got.hi, unit)
        return None if ok else f"records give {_fmt(got.lo, p['lo'])}-{_fmt(got.hi, p['hi'])}"
    if isinstance(computed, Span):  # one number for several values ("29x at batch 128 and 256"): each reads as it
        if s.kind != "number":
            return "the claim computes a range; the document states one value with an interval or a bound"
        ok = _agrees(p["v"], computed.lo, unit) and _agrees(p["v"], computed.hi, unit)
        return None if ok else f"records give {_fmt(computed.lo, p['v'])}-{_fmt(computed.hi, p['v'])}"
    v = Value.of(computed)
    if s.kind == "signed":  # the sign is stated: it must be the computed one's (a zero at the rounding takes either)
        signed = -_num(p["v"]) if p["sign"] == "-" else _num(p["v"])
        if not _agrees(p["v"], abs(v.value), unit) or (signed * v.value < 0):
            return f"records give {v.value:+.{_decimals(p['v'])}f}"
        return None
    if s.kind == "bound":
        op = p["op"].strip()
        if _bound_holds(op, p["v"], v.value, unit):
            return None
        side = "below" if op in UPPER else "above"
        return f"records give {v.value:.4g}, not {op} {p['v']} (at most one unit of its last digit {side} it)"
    if s.kind == "about":
        if math.isnan(v.value) or abs(v.value - _num(p["v"])) > _step(p["v"], unit) * (1 + 1e-9):
            return f"records give {v.value:.4g}, not about {p['v']} (within one unit of its last digit)"
        return None
    if not _agrees(p["v"], v.value, unit):
        return f"records give {_fmt(v.value, p['v'])}"
    if s.kind == "interval":
        if not v.has_interval:
            return "states an interval; the records give this comparison none"
        if not (_agrees(p["lo"], v.low, None) and _agrees(p["hi"], v.high, None)):
            return f"records give [{_fmt(v.low, p['lo'])}, {_fmt(v.high, p['hi'])}]"
    elif s.kind == "halfwidth":
        if not v.has_interval:
            return "states an interval; the records give this cell none"
        if not _agrees(p["hw"], 100 * v.halfwidth, None):
            return f"records give +-{_fmt(100 * v.halfwidth, p['hw'])}%"
    elif v.comparison and v.has_interval:
        return (
            f"a comparison with an interval ({_fmt(v.value, p['v'])} [{_fmt(v.low, p['v'])}, "
            f"{_fmt(v.high, p['v'])}]) stated without it"
        )
    return None


# --- what a number is about: its subject words ---------------------------------------------------------------------

# A sentence ends at . ! or ? (after any closing bracket, quote or bold) before white space; a paragraph, a list item
# and a heading end one too. A marker inside a table reads its cell, the row's first cell and its column's header.
SENTENCE_END = re.compile(r"[.!?](?:\*\*|[\"')\]])*(?=\s|\Z)")
BLOCK_START = re.compile(r"\n[ \t]*\n|\n(?=[ \t]*(?:[-*+] |\d+\. |#|\|))")


def _without_comments(s: str) -> str:
    return COMMENT.sub("", s)


def _table_context(text: str, pos: int) -> str | None:
    """For a position in a table row: its cell, the row's first cell and its column's header; else None."""
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    end = len(text) if end < 0 else end
    row = text[start:end]
    if not row.lstrip().startswith("|"):
        return None
    header = start
    while header > 0:
        prev = text.rfind("\n", 0, header - 1) + 1
        if not text[prev : header - 1].lstrip().startswith("|"):
            break
        header = prev
    head_line = text[header : text.find("\n", header)].split("|")
    cells = row.split("|")
    col = row[: pos - start].count("|")
    parts = [cells[1], cells[col]]
    if header != start and col < len(head_line):
        parts.append(head_line[col])
    return " | ".join(_without_comments(c).strip() for c in parts)


def sentence_at(text: str, pos: int) -> str:
    """The sentence of `text` that holds position `pos` (after the lead of its paragraph or list item, where it has
    one: bold text, or the link it opens with), its comments (markers) removed; in a table, the cell, its row's first
    cell and its column's header."""
    table = _table_context(text, pos)
    if table is not None:
        return table
    starts = [m.end() for m in BLOCK_START.finditer(text, 0, pos)]
    lo = max(starts, default=0)
    nxt = BLOCK_START.search(text, pos)
    hi = nxt.start() if nxt else len(text)
    block = lo
    for m in SENTENCE_END.finditer(text, lo, hi):
        if m.end() <= pos:
            lo = m.end()
        else:
            hi = m.end()
            break
    sentence = text[lo:hi]
    lead = re.match(r"\s*(?:[-*+] +)?(?:\*\*(.+?)\*\*|(\[[^\]\n]+\]\([^)\s]*\)))", text[block:hi], flags=re.DOTALL)
    if lead and block + lead.end() > lo:  # a sentence that ends inside the lead: the lead is its start
        sentence = text[block:hi]
    elif lead:  # the lead of the paragraph or list item (bold, or the link it opens with) says what it is about
        sentence = f"{lead.group(1) or lead.group(2)} ... {sentence}"
    return " ".join(_without_comments(sentence).split())


def has_word(sentence: str, word: str) -> bool:
    """Whether `word` (or a phrase: its spaces match any white space) stands in `sentence` as a whole word, in any
    case: "dali" is not found in "dali-sc", nor "sc" in it."""
    rx = r"\s+".join(re.escape(w) for w in word.split())
    return re.search(rf"(?<![\w-]){rx}(?![\w-])", sentence, flags=re.IGNORECASE) is not None


# --- a claims file -------------------------------------------------------------------------------------------------


class Claims:
    """tests/doc_claims.yaml: `runs` (alias -> {records, commit, probes}), `claims` (id -> {expr, round, subject}),
    evaluated against the tree at `root`."""

    def __init__(self, spec: dict, root: Path):
        self.root = Path(root)
        self.runs = {
            alias: Run(r["records"], r.get("commit"), self.root, r.get("probes")) for alias, r in spec["runs"].items()
        }
        self.claims = spec["claims"]
        self._cache: dict[str, object] = {}

    def namespace(self) -> dict:
        root = self.root
        return {
            **self.runs,
            "span": span,
            "pct": pct,
            "Value": Value,
            "crosscheck": lambda path, loader, precision, model=None: crosscheck(path, loader, precision, root, model),
            "read_json": lambda path: read_json(path, root),
            "median": lambda xs: float(np.median(list(xs))),
            "min": min,
            "max": max,
            "len": len,
            "abs": abs,
            "sum": sum,
            "sorted": sorted,
        }

    def value(self, cid: str):
        if cid not in self._cache:
            if cid not in self.claims:
                raise KeyError(f"marker c:{cid} has no entry in the claims file")
            expr = self.claims[cid]["expr"]
            # the namespace as globals: a generator expression's own scope sees them
            self._cache[cid] = eval(expr, {"__builtins__": {}, **self.namespace()})
        return self._cache[cid]

    def sources(self, cid: str) -> set[str]:
        """The result folders a claim reads: its runs' folders and any path in its expression."""
        expr = self.claims[cid]["expr"]
        out = {str(self.runs[a].folder) for a in self.runs if re.search(rf"\b{re.escape(a)}\.", expr)}
        out |= set(re.findall(r"'(docs/results/[^']+)'", expr))
        return out

    def check_document(self, text: str, name: str) -> tuple[list[str], list[str]]:
        """(the markers checked, what is wrong): every marker's stated number against its recomputation, and its
        sentence (`sentence_at`) against the claim's subject words."""
        seen, wrong = [], []
        for m in MARKER.finditer(text):
            cid = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            try:
                s = stated_before(text, m.start())
                c = self.claims.get(cid) or {}
                why = compare(s, self.value(cid), c.get("round"))
            except Exception as e:  # noqa: BLE001 (reported with the marker it belongs to)
                s, why = None, f"{type(e).__name__}: {e}"
            seen.append(cid)
            if why:
                wrong.append(f"{name}:{line}: {s.text if s else '?'!r} <!--c:{cid}-->: {why}")
            sentence = sentence_at(text, m.start())
            subject = self.subject(cid, name)
            missing = [w for w in subject if not has_word(sentence, w)]
            if missing:
                wrong.append(
                    f"{name}:{line}: <!--c:{cid}-->: its sentence does not say {', '.join(map(repr, missing))} (the "
                    f"claim's subject: {', '.join(subject)}): {sentence[:200]!r}"
                )
        return seen, wrong

    def subject(self, cid: str, doc: str | None = None) -> list[str]:
        """The words the sentence of each of the claim's markers in `doc` must say (what the number is about): the
        claim's `subject` list, or where it maps documents to lists (each words the number in another), `doc`'s."""
        words = (self.claims.get(cid) or {}).get("subject") or []
        if isinstance(words, dict):
            words = words.get(doc) or []
        return [str(w) for w in words]


def claimed_spans(text: str) -> list[tuple[int, int]]:
    """Where each marked number and its marker stand in `text`."""
    out = []
    for m in MARKER.finditer(text):
        try:
            out.append((stated_before(text, m.start()).start, m.end()))
        except ValueError:
            out.append((m.start(), m.end()))
    return out


def unmarked(text: str, allowed: list[str]) -> list[str]:
    """The numbers of `text` outside a marked claim, a link target, a code span and every `allowed` pattern (the
    numbers that are not measurements: batch sizes, GPU counts, dates, ...), each with its line."""
    blank = list(text)

    def clear(a: int, b: int) -> None:  # keeps the line breaks: the lines keep their numbers
        blank[a:b] = ["\n" if c == "\n" else " " for c in text[a:b]]

    for a, b in claimed_spans(text):
        clear(a, b)
    for rx in [r"\[[^\]]*\]\([^)]*\)", r"`[^`]*`", r"<!--.*?-->"]:  # links, code spans, other comments
        for m in list(re.finditer(rx, "".join(blank), flags=re.DOTALL)):
            clear(m.start(), m.end())
    fixed = "".join(blank)  # every allowed pattern is matched on the same text (a space in one matches a line break)
    for rx in allowed:
        for m in list(re.finditer(rx.replace(" ", r"\s+"), fixed, flags=re.IGNORECASE)):
            clear(m.start(), m.end())
    rest = "".join(blank)
    out = []
    for m in re.finditer(r"\d[\d,.]*", rest):
        line_no = rest.count("\n", 0, m.start()) + 1
        line = text.splitlines()[line_no - 1].strip()
        out.append(f"line {line_no}: {m.group(0)!r} in: {line[:160]}")
    return out
