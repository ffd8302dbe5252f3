"""TSMVA power models (VAHRM paper, §IV) and the single-stage models it is compared with (Table VI).

A GPU's power for a job is the fleet's average power for that job (stage 1)
plus the GPU's own deviation (stage 2):

* **stage 1** predicts the fleet-average power from the job's features (its
  workload, one-hot, and the workload's median SM and memory clocks), by
  linear regression (``lr``) or a random forest (``rf``), trained on every GPU;
* **stage 2** is a random forest on stage 1's residuals whose inputs are the
  job's features, stage 1's prediction and the device's own history: its mean
  relative residual over its other runs, over its other runs of this
  workload, and how many runs each is (what identifies a device to a model
  that must also serve GPUs it has few runs of).

The single-stage models are the paper's baseline (Variability-Trained
Prediction): one model per device, trained on that device's runs only, with
the same job features (``LR``, ``RF``). Two fleet-wide single-stage controls
that take the device as a one-hot feature (``LR-fleet``, ``RF-fleet``) are
reported beside them. The per-device forests have 5 trees (a device has a few
dozen runs at most; 700 forests of more trees cost minutes).

Evaluation (``evaluate``), as Table VI reports MAPE averaged over workloads:

* **held-out runs**: a quarter of each (device, workload)'s runs (at least one,
  where it has two or more) are test runs;
* **held-out GPUs**: for a third of the devices that ran two or more workloads,
  all their runs of one workload are test runs: the model has seen the GPU
  only on other workloads and the workload only on other GPUs (the paper
  holds kernels out per GPU the same way).

``app`` (``Records.app``, ``per_app``) names a workload, the paper's
*application* (a benchmark program such as ResNet-50), which many jobs run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pcs_ray.power.records import Records

MODELS = ("LR", "RF", "TSMVA(LR+RF)", "TSMVA(RF+RF)")
CONTROLS = ("LR-fleet", "RF-fleet")
#: The paper's Table VI / §VI-A MAPEs (%) on GPUs, for the report.
PAPER_MAPE = {
    "P100 (TSUBAME3.0, Fig. 5)": {"LR": 5.4, "RF": 4.6, "TSMVA(LR+RF)": 2.12, "TSMVA(RF+RF)": 1.54},
    "V100 (Cygnus, Table VI)": {"LR": 15.04, "RF": 8.51, "TSMVA(LR+RF)": 5.31, "TSMVA(RF+RF)": 3.05},
}


def _rf(trees: int, seed: int, leaf: int = 1):
    from sklearn.ensemble import RandomForestRegressor

    return RandomForestRegressor(n_estimators=trees, min_samples_leaf=leaf, random_state=seed, n_jobs=1)


class JobFeatures:
    """Workload one-hot plus the workload's median clocks, learnt from training runs."""

    def __init__(self, train: Records) -> None:
        self.apps = sorted(set(train.app.tolist()))
        self.pos = {a: i for i, a in enumerate(self.apps)}
        self.clocks = {}
        for a in self.apps:
            m = train.app == a
            self.clocks[a] = (_median(train.sm_clock[m]), _median(train.mem_clock[m]))
        self.default = (_median(train.sm_clock), _median(train.mem_clock))

    def __call__(self, apps: np.ndarray) -> np.ndarray:
        x = np.zeros((len(apps), len(self.apps) + 2))
        for i, a in enumerate(apps):
            j = self.pos.get(a)
            if j is not None:
                x[i, j] = 1.0
            x[i, -2:] = self.clocks.get(a, self.default)
        return x


def _median(v: np.ndarray) -> float:
    v = v[np.isfinite(v)]
    return float(np.median(v)) if len(v) else 0.0


@dataclass
class TSMVA:
    """A fitted two-stage model: ``predict(apps, devices)`` in watts."""

    stage1: str
    features: JobFeatures
    first: object
    second: object
    history: dict  # device -> (sum rel residual, count); (device, app) -> same

    @classmethod
    def fit(cls, train: Records, stage1: str = "rf", seed: int = 0, trees: int = 60) -> "TSMVA":
        from sklearn.linear_model import LinearRegression

        feats = JobFeatures(train)
        x = feats(train.app)
        first = LinearRegression() if stage1 == "lr" else _rf(trees, seed, leaf=5)
        first.fit(x, train.power)
        base = first.predict(x)
        rel = train.power / base - 1.0
        history: dict = {}
        for d, a, r in zip(train.device, train.app, rel):
            for key in (d, (d, a)):
                s, n = history.get(key, (0.0, 0))
                history[key] = (s + r, n + 1)
        h = _history_features(history, train.device, train.app, rel)
        second = _rf(trees, seed + 1, leaf=2)
        second.fit(np.column_stack([x, base, h]), train.power - base)
        return cls(stage1, feats, first, second, history)

    def predict(self, apps: np.ndarray, devices: np.ndarray) -> np.ndarray:
        x = self.features(apps)
        base = self.first.predict(x)
        h = _history_features(self.history, devices, apps, None)
        return base + self.second.predict(np.column_stack([x, base, h]))

    def baseline(self, apps: np.ndarray) -> np.ndarray:
        """Stage 1 alone: the fleet-average power of each job."""
        return self.first.predict(self.features(apps))


def _history_features(history: dict, devices: np.ndarray, apps: np.ndarray, own: np.ndarray | None) -> np.ndarray:
    """Per row: the device's mean relative residual over its other runs and over its other runs of this
    workload, and how many runs each is. ``own``: the rows' own residuals (training rows leave themselves out)."""
    out = np.zeros((len(devices), 4))
    for i, (d, a) in enumerate(zip(devices, apps)):
        mine = own[i] if own is not None else 0.0
        k = 1 if own is not None else 0
        s, n = history.get(d, (0.0, 0))
        sa, na = history.get((d, a), (0.0, 0))
        s, n, sa, na = s - mine, n - k, sa - mine, na - k
        out[i] = (s / n if n > 0 else 0.0, n, sa / na if na > 0 else 0.0, na)
    return out


class PerDevice:
    """The single-stage baseline: one model per device on its own runs (the fleet model where a device has none)."""

    def __init__(self, kind: str, train: Records, seed: int = 0, trees: int = 5) -> None:
        self.features = JobFeatures(train)
        x = self.features(train.app)
        make = _LeastSquares if kind == "lr" else (lambda: _SmallForest(trees, seed))
        self.models = {}
        for d in np.unique(train.device):
            m = train.device == d
            self.models[d] = make().fit(x[m], train.power[m])
        self.fleet = make().fit(x, train.power)

    def predict(self, apps: np.ndarray, devices: np.ndarray) -> np.ndarray:
        x = self.features(apps)
        out = np.empty(len(apps))
        for d in np.unique(devices):
            m = devices == d
            out[m] = self.models.get(d, self.fleet).predict(x[m])
        return out


class _LeastSquares:
    """Ordinary least squares with an intercept, minimum-norm where rows are few (scikit-learn's
    ``LinearRegression``, without its per-fit overhead: the baseline fits one per device)."""

    def fit(self, x: np.ndarray, y: np.ndarray) -> "_LeastSquares":
        mx, my = x.mean(axis=0), y.mean()
        sx = x.std(axis=0)
        sx[sx == 0] = 1.0
        coef = np.linalg.lstsq((x - mx) / sx, y - my, rcond=1e-9)[0]
        self.coef = coef / sx
        self.intercept = my - mx @ self.coef
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return x @ self.coef + self.intercept


class _SmallForest:
    """A random forest (bootstrap-bagged regression trees, scikit-learn's defaults) for a device's few
    runs: ``RandomForestRegressor`` spends ~30 ms per fit on machinery, 700 devices would take minutes."""

    def __init__(self, trees: int, seed: int) -> None:
        self.trees, self.seed = trees, seed

    def fit(self, x: np.ndarray, y: np.ndarray) -> "_SmallForest":
        from sklearn.tree import DecisionTreeRegressor

        rng = np.random.default_rng(self.seed)
        x = np.asfortranarray(x, dtype=np.float32)  # the trees' own dtype: no per-fit validation copy
        y = np.ascontiguousarray(y, dtype=np.float64)
        self.members = []
        for k in range(self.trees):
            idx = rng.integers(len(y), size=len(y))
            tree = DecisionTreeRegressor(random_state=self.seed + k)
            self.members.append(tree.fit(np.asfortranarray(x[idx]), y[idx], check_input=False))
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        return np.mean([t.predict(x, check_input=False) for t in self.members], axis=0)


class Fleet:
    """A fleet-wide single-stage control: job features plus the device one-hot."""

    def __init__(self, kind: str, train: Records, seed: int = 0, trees: int = 30) -> None:
        from sklearn.linear_model import LinearRegression

        self.features = JobFeatures(train)
        self.devices = {d: i for i, d in enumerate(sorted(set(train.device.tolist())))}
        self.model = (LinearRegression() if kind == "lr" else _rf(trees, seed, leaf=2))
        self.model.fit(self._x(train.app, train.device), train.power)

    def _x(self, apps, devices) -> np.ndarray:
        from scipy.sparse import csr_matrix, hstack

        rows = [i for i, d in enumerate(devices) if d in self.devices]
        cols = [self.devices[d] for d in devices if d in self.devices]
        onehot = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(devices), len(self.devices)))
        return hstack([csr_matrix(self.features(apps)), onehot]).tocsr()

    def predict(self, apps: np.ndarray, devices: np.ndarray) -> np.ndarray:
        return self.model.predict(self._x(apps, devices))


def fit_model(name: str, train: Records, seed: int = 0, trees: int = 60):
    """One of ``MODELS`` or ``CONTROLS`` fitted on ``train`` (``trees``: of the fleet-wide forests)."""
    if name == "LR":
        return PerDevice("lr", train, seed)
    if name == "RF":
        return PerDevice("rf", train, seed)
    if name == "TSMVA(LR+RF)":
        return TSMVA.fit(train, "lr", seed, trees)
    if name == "TSMVA(RF+RF)":
        return TSMVA.fit(train, "rf", seed, trees)
    if name == "LR-fleet":
        return Fleet("lr", train, seed)
    if name == "RF-fleet":
        return Fleet("rf", train, seed, trees // 2)
    raise ValueError(f"unknown power model {name!r}; valid: {', '.join(MODELS + CONTROLS)}")


# -- evaluation ---------------------------------------------------------------------------


def split_runs(rec: Records, seed: int = 0, fraction: float = 0.25) -> np.ndarray:
    """Test mask for held-out runs: a ``fraction`` of each (device, workload)'s runs, where it has two or more."""
    rng = np.random.default_rng(seed)
    test = np.zeros(len(rec), dtype=bool)
    groups: dict = {}
    for i, key in enumerate(zip(rec.device, rec.app)):
        groups.setdefault(key, []).append(i)
    for key in sorted(groups):
        idx = groups[key]
        if len(idx) >= 2:
            k = max(1, int(round(fraction * len(idx))))
            test[rng.choice(idx, size=k, replace=False)] = True
    return test


def split_gpus(rec: Records, seed: int = 0, fraction: float = 1 / 3) -> np.ndarray:
    """Test mask for held-out GPUs: for a ``fraction`` of the devices with two or more workloads, every
    run of one of their workloads (drawn at random)."""
    rng = np.random.default_rng(seed)
    apps_of: dict = {}
    for d, a in zip(rec.device, rec.app):
        apps_of.setdefault(d, set()).add(a)
    multi = sorted(d for d, apps in apps_of.items() if len(apps) >= 2)
    chosen = rng.choice(len(multi), size=int(round(fraction * len(multi))), replace=False) if multi else []
    held = {multi[i]: sorted(apps_of[multi[i]])[rng.integers(len(apps_of[multi[i]]))] for i in sorted(chosen)}
    return np.asarray([held.get(d) == a for d, a in zip(rec.device, rec.app)], dtype=bool)


def mape(pred: np.ndarray, true: np.ndarray, apps: np.ndarray) -> dict:
    """MAPE (%) per workload and their mean (the paper averages over kernels)."""
    err = 100.0 * np.abs(pred - true) / true
    per = {a: float(err[apps == a].mean()) for a in sorted(set(apps.tolist()))}
    return {"mean": float(np.mean(list(per.values()))) if per else float("nan"), "per_app": per,
            "runs": int(len(true))}


def evaluate(rec: Records, seed: int = 0, models=MODELS + CONTROLS, trees: int = 60) -> dict:
    """MAPE of every model on both held-out splits."""
    out = {}
    for split, mask in (("held_out_runs", split_runs(rec, seed)), ("held_out_gpus", split_gpus(rec, seed))):
        if not mask.any():
            out[split] = {"error": "no test runs (needs devices with several runs / several workloads)"}
            continue
        train, test = rec.take(~mask), rec.take(mask)
        out[split] = {"train_runs": int(len(train)), "test_runs": int(len(test)),
                      "test_devices": int(len(set(test.device.tolist())))}
        for name in models:
            model = fit_model(name, train, seed, trees)
            out[split][name] = mape(model.predict(test.app, test.device), test.power, test.app)
    return out


def held_out_predictions(rec: Records, seed: int = 0, folds: int = 5) -> dict[tuple[str, str], float]:
    """TSMVA(RF+RF)'s prediction of each (device, workload)'s mean power from a model that never saw
    that pair (pairs in ``folds`` groups): what a scheduler would predict for a GPU's first run of a job."""
    pairs = sorted(set(zip(rec.device.tolist(), rec.app.tolist())))
    rng = np.random.default_rng(seed)
    fold_of = dict(zip(pairs, rng.permutation(len(pairs)) % folds))
    fold = np.asarray([fold_of[p] for p in zip(rec.device.tolist(), rec.app.tolist())])
    out: dict[tuple[str, str], float] = {}
    for k in range(folds):
        test = fold == k
        if not test.any():
            continue
        model = TSMVA.fit(rec.take(~test), "rf", seed)
        held = [p for p in pairs if fold_of[p] == k]
        pred = model.predict(np.asarray([a for _, a in held]), np.asarray([d for d, _ in held]))
        out.update({p: float(v) for p, v in zip(held, pred)})
    return out


__all__ = ["CONTROLS", "MODELS", "PAPER_MAPE", "TSMVA", "evaluate", "fit_model", "held_out_predictions", "mape",
           "split_gpus", "split_runs"]
