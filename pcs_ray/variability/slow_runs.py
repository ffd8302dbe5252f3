"""Predicting slow runs before they start (RUSH, Nichols et al.): per-run dataset, model selection, predictions.

A run is **slow** when its time exceeds its application's mean by more than
1.5 standard deviations (RUSH's "variation" label). Every feature of a run is
known *before* it starts: the device's, node's and cabinet's earlier runs
(mean and exponentially decayed slowdown, last slowdown, last temperature,
power and clocks, time since the device's last run, how many of its earlier
runs were slow, whether the last one was, hours since the last slow run and
how many in the last 6 hours), where the GPU sits (cabinet, node, slot), the
time of day, the application, and how many other runs started on the same
node in the previous 15 minutes. No feature reads the run's own
measurements, nor those of a run that started at the same moment (the other
GPUs of a multi-GPU run: their outcome is not known before it starts).

Model selection as RUSH does it: runs in time order; per application the
first ``train`` fraction is the training split, the rest the later runs of
the final score.
Recursive feature elimination (a random forest's importances) keeps at most
20 features; AdaBoost, random forest, ExtraTrees and k-nearest-neighbours
are compared by stratified k-fold F1 on the training split; the best is
refitted on the whole split and scored on the later runs. A grouped k-fold
F1 (the runs that started together in one fold) is reported beside it. The naive baseline
predicts slow when the device's past mean slowdown exceeds a threshold fitted
on the training split.

Per-run records come from the bundled Longhorn files (``pcs_ray.variability.longhorn``)
or from a CSV in the live system's job-history schema (``read_csv``).
"""

from __future__ import annotations

import csv
import itertools
import math
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pcs_ray.variability.longhorn import LonghornError, Run, load_runs

SLOW_SIGMAS = 1.5
MAX_FEATURES = 20
DECAY = 0.5  # weight of the newest run in the decayed slowdowns
NEIGHBOUR_WINDOW = 900.0  # seconds: runs started on the node this recently count as running beside it
RECENT = 6 * 3600.0  # seconds: slow runs this recent on the node or cabinet count as its recent state
NEVER_H = RECENT / 3600.0 * 4  # "hours since the last slow run" when there was none within RECENT
MODELS = ("adaboost", "random-forest", "extra-trees", "knn")

#: The per-run CSV schema (one row per run; what the live job history and telemetry write).
CSV_COLUMNS = ("app", "device", "cabinet", "node", "ts", "runtime", "power", "sm_clock", "mem_clock", "temperature")
CSV_REQUIRED = ("app", "device", "ts", "runtime")


class SlowRunError(ValueError):
    """Per-run data or settings that cannot be used (one line)."""


# -- records ------------------------------------------------------------------------------


def load_records(source: str) -> list[Run]:
    """``longhorn`` (the bundled records of the four applications) or a per-run CSV file."""
    if source == "longhorn":
        return [r for r in load_runs() if r.ts is not None]
    path = Path(source)
    if path.suffix.lower() != ".csv" or not path.exists():
        raise SlowRunError(f"unknown data set {source!r}: give 'longhorn' or an existing per-run .csv file")
    return read_csv(path)


def read_csv(path: Path) -> list[Run]:
    """Runs from a CSV with columns ``CSV_COLUMNS`` (``app``, ``device``, ``ts`` (Unix s) and ``runtime``
    required; empty cells of the others are unknown). A bad row fails with its line number."""
    def num(row, col, line, required=False):
        value = (row.get(col) or "").strip()
        if not value:
            if required:
                raise SlowRunError(f"{path}:{line}: column {col!r} is empty")
            return float("nan")
        try:
            x = float(value)
        except ValueError:
            raise SlowRunError(f"{path}:{line}: column {col!r} is not a number: {value!r}") from None
        if not math.isfinite(x):
            raise SlowRunError(f"{path}:{line}: column {col!r} is not finite: {value!r}")
        return x

    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in CSV_REQUIRED if c not in (reader.fieldnames or ())]
            if missing:
                raise SlowRunError(f"{path}:1: missing column(s) {', '.join(missing)}; required: {', '.join(CSV_REQUIRED)}")
            runs = []
            for line, row in enumerate(reader, start=2):
                if None in row or any(v is None for v in row.values()):
                    raise SlowRunError(f"{path}:{line}: expected {len(reader.fieldnames)} fields")
                app, device = (row.get("app") or "").strip(), (row.get("device") or "").strip()
                if not app or not device:
                    raise SlowRunError(f"{path}:{line}: 'app' and 'device' must not be empty")
                runtime = num(row, "runtime", line, True)
                if runtime <= 0:
                    raise SlowRunError(f"{path}:{line}: 'runtime' must be > 0, got {runtime:g}")
                node = num(row, "node", line)
                runs.append(Run(
                    app=app, device=device, uuid=device, cabinet=(row.get("cabinet") or "").strip() or None,
                    node=None if math.isnan(node) else int(node), slot=None, ts=int(num(row, "ts", line, True)),
                    runtime=runtime, perf=runtime, power=num(row, "power", line), power_sample=num(row, "power", line),
                    sm_clock=num(row, "sm_clock", line), mem_clock=num(row, "mem_clock", line),
                    temperature=num(row, "temperature", line),
                ))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise SlowRunError(f"{path}: cannot read ({e})") from None
    if len(runs) < 2:
        raise SlowRunError(f"{path}: needs at least 2 runs, has {len(runs)}")
    return runs


# -- the dataset ----------------------------------------------------------------------------


@dataclass
class Dataset:
    """Runs in time order with their features (known before each run) and labels."""

    runs: list[Run]
    features: list[str]
    X: np.ndarray
    y: np.ndarray  # 1 = slow
    slowdown: np.ndarray  # runtime / the app's mean runtime
    naive: np.ndarray  # the device's past mean slowdown (the baseline's input; 1.0 without history)
    thresholds: dict[str, float] = field(default_factory=dict)  # app -> slow above this runtime


class _History:
    """Exponentially decayed and plain means of slowdowns, when the last slow run started, and the last run's
    telemetry."""

    __slots__ = ("n", "total", "decayed", "last", "last_slow", "slow", "slow_ts", "ts", "temp", "power", "clock")

    def __init__(self) -> None:
        self.n, self.total, self.decayed, self.last, self.slow = 0, 0.0, 1.0, 1.0, 0
        self.last_slow = False
        self.slow_ts: deque = deque()  # start times of the slow runs within ``RECENT`` of the newest run
        self.ts = self.temp = self.power = self.clock = float("nan")

    def add(self, run: Run, slowdown: float, slow: bool) -> None:
        self.decayed = slowdown if self.n == 0 else DECAY * slowdown + (1 - DECAY) * self.decayed
        self.n += 1
        self.total += slowdown
        self.last, self.last_slow = slowdown, slow
        self.slow += slow
        if slow:
            self.slow_ts.append(float(run.ts))
        self.ts, self.temp, self.power, self.clock = float(run.ts), run.temperature, run.power, run.sm_clock

    def mean(self) -> float:
        return self.total / self.n if self.n else 1.0

    def _recent(self, ts: float) -> deque:
        """The start times of slow runs within ``RECENT`` before ``ts`` (older ones are dropped)."""
        while self.slow_ts and self.slow_ts[0] < ts - RECENT:
            self.slow_ts.popleft()
        return self.slow_ts

    def since_slow_h(self, ts: float) -> float:
        """Hours since the latest slow run started here (``NEVER_H`` when none in the last ``RECENT``)."""
        recent = self._recent(ts)
        return (ts - recent[-1]) / 3600.0 if recent else NEVER_H

    def recent_slow(self, ts: float) -> int:
        return len(self._recent(ts))


FEATURES_FIXED = (
    "dev_runs", "dev_mean", "dev_decayed", "dev_last", "dev_last_slow", "dev_slow_frac", "dev_since_last_h",
    "dev_since_slow_h", "dev_last_temp", "dev_last_power", "dev_last_clock", "node_runs", "node_mean",
    "node_decayed", "node_last_slow", "node_slow_frac", "node_since_slow_h", "node_recent_slow", "node_neighbours",
    "cab_mean", "cab_decayed", "cab_since_slow_h", "cab_recent_slow", "cabinet", "node", "slot", "hour_sin",
    "hour_cos",
)


def build_dataset(runs: Sequence[Run]) -> Dataset:
    """Label and featurise ``runs`` (sorted by time here; runs without a time stamp are dropped).

    A run's features see only runs that started strictly earlier: runs starting at the same second (the
    GPUs of one multi-GPU job, as Longhorn's node-wide runs) are featurised together, before any of them
    enters the history (one GPU's outcome must not predict its job-mate's)."""
    runs = sorted((r for r in runs if r.ts is not None), key=lambda r: (r.ts, r.device, r.app))
    if len(runs) < 2:
        raise SlowRunError("need at least 2 time-stamped runs")
    by_app: dict[str, list[float]] = defaultdict(list)
    for r in runs:
        by_app[r.app].append(r.runtime)
    stats = {a: (float(np.mean(v)), float(np.std(v))) for a, v in by_app.items()}
    thresholds = {a: m + SLOW_SIGMAS * s for a, (m, s) in stats.items()}
    apps = sorted(by_app)
    cabinets = sorted({r.cabinet or "?" for r in runs})
    device_h: dict[str, _History] = defaultdict(_History)
    node_h: dict[tuple, _History] = defaultdict(_History)
    cab_h: dict[str, _History] = defaultdict(_History)
    recent: dict[tuple, deque] = defaultdict(deque)
    names = [*FEATURES_FIXED, *[f"app_{a}" for a in apps]]
    X = np.zeros((len(runs), len(names)))
    y = np.zeros(len(runs), dtype=np.int64)
    slowdown = np.zeros(len(runs))
    naive = np.zeros(len(runs))
    app_n: dict[str, int] = defaultdict(int)
    app_sum: dict[str, float] = defaultdict(float)
    app_sq: dict[str, float] = defaultdict(float)

    def node_key(r: Run) -> tuple:
        return (r.cabinet, r.node) if r.node is not None else ("dev", r.device)

    for _, together in itertools.groupby(range(len(runs)), key=lambda i: runs[i].ts):  # runs of one start time
        together = list(together)
        start, stop = together[0], together[-1] + 1
        for i in range(start, stop):
            r = runs[i]
            d, nkey = device_h[r.device], node_key(r)
            nd, cb = node_h[nkey], cab_h[r.cabinet or "?"]
            window = recent[nkey]
            while window and window[0] < r.ts - NEIGHBOUR_WINDOW:
                window.popleft()
            hour = (r.ts % 86400) / 3600.0
            X[i] = [
                d.n, d.mean(), d.decayed, d.last, float(d.last_slow), d.slow / d.n if d.n else 0.0,
                (r.ts - d.ts) / 3600.0 if d.n else -1.0, d.since_slow_h(r.ts), _or(d.temp, -1.0),
                _or(d.power, -1.0), _or(d.clock, -1.0),
                nd.n, nd.mean(), nd.decayed, float(nd.last_slow), nd.slow / nd.n if nd.n else 0.0,
                nd.since_slow_h(r.ts), nd.recent_slow(r.ts), len(window),
                cb.mean(), cb.decayed, cb.since_slow_h(r.ts), cb.recent_slow(r.ts),
                cabinets.index(r.cabinet or "?"), -1 if r.node is None else r.node,
                -1 if r.slot is None else r.slot, math.sin(2 * math.pi * hour / 24), math.cos(2 * math.pi * hour / 24),
                *[float(r.app == a) for a in apps],
            ]
            naive[i] = d.mean()
            slowdown[i] = r.runtime / stats[r.app][0]
            y[i] = int(r.runtime > thresholds[r.app])
        # What later runs' features see of these runs: their slowdown and slowness against the application's
        # runs that started *before* them (the label's whole-data mean and sd would leak later runs).
        seen = []
        for r in runs[start:stop]:
            k = app_n[r.app]
            mean = app_sum[r.app] / k if k else r.runtime
            sd = math.sqrt(max(app_sq[r.app] / k - mean * mean, 0.0)) if k else 0.0
            seen.append((r.runtime / mean, k >= 2 and r.runtime > mean + SLOW_SIGMAS * sd))
        for r, (sd_, slow_) in zip(runs[start:stop], seen):
            app_n[r.app] += 1
            app_sum[r.app] += r.runtime
            app_sq[r.app] += r.runtime * r.runtime
            nkey = node_key(r)
            device_h[r.device].add(r, sd_, slow_)
            node_h[nkey].add(r, sd_, slow_)
            cab_h[r.cabinet or "?"].add(r, sd_, slow_)
            recent[nkey].append(r.ts)
    return Dataset(list(runs), names, X, y, slowdown, naive, thresholds)


def _or(x: float, default: float) -> float:
    return default if math.isnan(x) else x


# -- model selection -----------------------------------------------------------------------------


def _make(name: str, seed: int):
    from sklearn.ensemble import AdaBoostClassifier, ExtraTreesClassifier, RandomForestClassifier
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if name == "adaboost":
        return AdaBoostClassifier(n_estimators=50, random_state=seed)
    if name == "random-forest":
        return RandomForestClassifier(n_estimators=60, min_samples_leaf=2, class_weight="balanced_subsample",
                                      random_state=seed, n_jobs=1)
    if name == "extra-trees":
        return ExtraTreesClassifier(n_estimators=60, min_samples_leaf=2, class_weight="balanced_subsample",
                                    random_state=seed, n_jobs=1)
    if name == "knn":
        return make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=5))
    raise SlowRunError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")


@dataclass
class FitResult:
    """What ``fit`` found; ``to_json`` is what ``slow-runs fit --out`` writes."""

    data: str
    runs: int
    train_runs: int
    test_runs: int
    slow_fraction: float
    features: list[str]  # kept by RFE
    cv_f1: dict[str, float]  # model -> stratified k-fold F1 on the training split
    grouped_cv_f1: dict[str, float]  # the same with the runs that started together kept in one fold
    test_f1: dict[str, float]  # model -> F1 on the later runs
    chosen: str
    by_app: dict[str, dict]  # app -> the chosen model on its later runs: runs, slow, predicted, both, F1
    baseline_threshold: float
    baseline_test_f1: float
    thresholds: dict[str, float]
    seed: int
    train: float
    folds: int
    model: object = field(default=None, repr=False)  # the chosen, fitted estimator
    columns: list[int] = field(default_factory=list, repr=False)  # dataset columns of ``features``
    test: np.ndarray | None = field(default=None, repr=False)  # which dataset runs are the later (test) runs

    def to_json(self) -> dict:
        return {
            "data": self.data, "runs": self.runs, "train_runs": self.train_runs, "test_runs": self.test_runs,
            "slow_fraction": round(self.slow_fraction, 4), "label": f"runtime > app mean + {SLOW_SIGMAS} sd",
            "features": self.features, "cv_f1": _rounded(self.cv_f1),
            "grouped_cv_f1": _rounded(self.grouped_cv_f1), "test_f1": _rounded(self.test_f1),
            "chosen": self.chosen, "chosen_test_f1": round(self.test_f1[self.chosen], 4),
            "chosen_by_app": self.by_app,
            "baseline": {"rule": "device's past mean slowdown > threshold", "threshold": round(self.baseline_threshold, 4),
                         "test_f1": round(self.baseline_test_f1, 4)},
            "beats_baseline": self.test_f1[self.chosen] > self.baseline_test_f1,
            "slow_thresholds": _rounded(self.thresholds), "seed": self.seed, "train": self.train, "folds": self.folds,
        }

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.model.predict(X[:, self.columns]), dtype=bool)


def _rounded(d: dict) -> dict:
    return {k: round(float(v), 4) for k, v in d.items()}


def fit(ds: Dataset, *, data: str = "", train: float = 0.7, folds: int = 5, seed: int = 0,
        models: Sequence[str] = MODELS) -> FitResult:
    """Select, fit and score a slow-run classifier on ``ds`` as RUSH does (see the module's note)."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.feature_selection import RFE
    from sklearn.metrics import f1_score, make_scorer
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold, cross_val_score

    if not 0 < train < 1:
        raise SlowRunError(f"the training fraction must be in (0, 1), got {train}")
    split = _split(ds, train)
    tr, te = ~split, split
    cut = int(tr.sum())
    ytr, yte = ds.y[tr], ds.y[te]
    if cut < folds or len(yte) == 0 or ytr.sum() < folds or ytr.sum() == len(ytr):
        raise SlowRunError(f"too few runs to fit: {cut} training runs with {int(ytr.sum())} slow, "
                           f"{len(yte)} later runs; need {folds}+ slow and fast runs to train on")
    Xtr, Xte = ds.X[tr], ds.X[te]
    keep = min(MAX_FEATURES, ds.X.shape[1])
    ranker = RandomForestClassifier(n_estimators=50, min_samples_leaf=2, class_weight="balanced_subsample",
                                    random_state=seed, n_jobs=1)
    rfe = RFE(ranker, n_features_to_select=keep, step=4).fit(Xtr, ytr)
    cols = [int(i) for i in np.flatnonzero(rfe.support_)]
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    # RUSH's stratified k-fold splits the GPUs of one multi-GPU run (same start, same node and cabinet
    # history, so nearly the same features) across folds: the model is scored on its own run's twins. The
    # grouped score keeps the runs that started together in one fold; it is reported, not used to choose.
    grouped = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
    groups = np.array([r.ts for r in ds.runs])[tr]
    f1 = make_scorer(f1_score, zero_division=0)  # a fold whose model predicts nothing scores 0, silently
    cv_f1, grouped_cv_f1, test_f1, fitted = {}, {}, {}, {}
    for name in models:
        cv_f1[name] = float(cross_val_score(_make(name, seed), Xtr[:, cols], ytr, cv=cv, scoring=f1).mean())
        grouped_cv_f1[name] = float(cross_val_score(_make(name, seed), Xtr[:, cols], ytr, cv=grouped, groups=groups,
                                                    scoring=f1, error_score=0.0).mean())
        model = fitted[name] = _make(name, seed).fit(Xtr[:, cols], ytr)
        test_f1[name] = float(f1_score(yte, model.predict(Xte[:, cols]), zero_division=0))
    chosen = max(models, key=lambda m: (cv_f1[m], -list(models).index(m)))
    # Per application: one F1 over all runs can hide that the model predicts one application only.
    by_app = {}
    predicted, apps = fitted[chosen].predict(Xte[:, cols]).astype(bool), np.array([r.app for r in ds.runs])[te]
    for app in sorted(set(apps)):
        m = apps == app
        y, p = yte[m].astype(bool), predicted[m]
        by_app[app] = {"runs": int(m.sum()), "slow": int(y.sum()), "predicted": int(p.sum()),
                       "predicted_and_slow": int((y & p).sum()),
                       "f1": round(float(f1_score(y, p, zero_division=0)), 4) if y.any() or p.any() else None}
    # The naive baseline: one threshold on the device's past mean slowdown, the best F1 on the training split.
    candidates = np.unique(np.quantile(ds.naive[tr], np.linspace(0.5, 0.999, 60)))
    best_t, best_f = float(candidates[-1]), -1.0
    for t in candidates:
        f = f1_score(ytr, ds.naive[tr] > t, zero_division=0)
        if f > best_f:
            best_t, best_f = float(t), f
    base_f1 = float(f1_score(yte, ds.naive[te] > best_t, zero_division=0))
    return FitResult(
        data=data, runs=len(ds.y), train_runs=cut, test_runs=len(yte), slow_fraction=float(ds.y.mean()),
        features=[ds.features[i] for i in cols], cv_f1=cv_f1, grouped_cv_f1=grouped_cv_f1, test_f1=test_f1,
        chosen=chosen, by_app=by_app,
        baseline_threshold=best_t, baseline_test_f1=base_f1, thresholds=ds.thresholds, seed=seed, train=train,
        folds=folds, model=fitted[chosen], columns=cols, test=te,
    )


def _split(ds: Dataset, train: float) -> np.ndarray:
    """Which runs are later runs (the test split): per application, the last ``1 - train`` of its runs in
    time. The applications were measured in different campaigns (SGEMM in 2020, the others in 2022), so one
    cut over all runs would train on one application and test on the others."""
    test = np.zeros(len(ds.runs), dtype=bool)
    by_app: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(ds.runs):
        by_app[r.app].append(i)
    for idx in by_app.values():  # already in time order
        test[idx[int(round(len(idx) * train)):]] = True
    return test


__all__ = [
    "CSV_COLUMNS", "CSV_REQUIRED", "MAX_FEATURES", "MODELS", "SLOW_SIGMAS", "Dataset", "FitResult", "LonghornError",
    "SlowRunError", "build_dataset", "fit", "load_records", "read_csv",
]
