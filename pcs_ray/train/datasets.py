"""Ray Data datasets handed to ``TorchTrainer(datasets=...)``: written once by the driver, read by every run.

::

    trainer = TorchTrainer(train_func, datasets={"train": train_ds, "validation": val_ds},
                           dataset_config=DataConfig(datasets_to_split=["train"]))   # default: "all" split

    def train_func(config):
        shard = train.get_dataset_shard("train")
        for epoch in range(config["epochs"]):
            for batch in shard.iter_torch_batches(batch_size=32):   # one call: one pass, one epoch
                ...

At submission the driver materializes each dataset (``iter_batches(batch_format="pyarrow")``: Ray Data
runs its plan on the cluster once) into one uncompressed Arrow IPC file, ``datasets/<token>/<name>.arrow``
in the cluster's storage (``pcs-ray start --storage``) or, without one, its ``STATE_DIR`` (which every node
must then share). The job spec's ``datasets`` says where they are (the coordinator hands it to each rank as
``$PCS_RAY_DATASETS``), so every run of it, on any node and world size, reads the same rows. ``fit()``
deletes them once the job ended.

A rank memory-maps the whole file (a storage's is first downloaded into the node's cache,
``$PCS_RAY_CACHE``) and takes its rows by index: it pays for the pages it touches, and ranks of a node
share them through the page cache. A split dataset is read through the job's resumable order
(:mod:`pcs_ray.train.data_order`): each pass is this rank's share of the epoch from the job's position
in it, re-split on whatever world size the run has, and every checkpoint records that position, so a
preempted or resized job sees each row once per epoch. Rows are in the dataset's own order unless
``local_shuffle_buffer_size`` asks for a shuffle (then a seeded permutation of the whole epoch, with
``local_shuffle_seed``). A dataset that is not split gives every rank all its rows, in order.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

ENV = "PCS_RAY_DATASETS"  # in a rank's environment: the job spec's datasets, as staged
SUFFIX = ".arrow"
FOLDER = "datasets"


class DataConfig:
    """Ray Train's ``DataConfig``: ``datasets_to_split`` (``"all"``, the default, or the names of the
    datasets split across ranks; every other dataset is read whole by every rank). ``execution_options``
    is accepted and has no effect (the datasets are materialized once, at submission); so is
    ``enable_shard_locality`` (every rank reads the same files)."""

    def __init__(self, datasets_to_split: str | list[str] = "all", execution_options: Any = None,
                 enable_shard_locality: bool = True) -> None:
        if datasets_to_split != "all" and (isinstance(datasets_to_split, str) or not all(
                isinstance(n, str) for n in datasets_to_split)):
            from pcs_ray.train.config import refuse

            raise refuse("DataConfig(datasets_to_split)",
                         f"'all' or a list of dataset names, got {datasets_to_split!r}")
        self.datasets_to_split = datasets_to_split if datasets_to_split == "all" else list(datasets_to_split)
        self.execution_options, self.enable_shard_locality = execution_options, enable_shard_locality

    def split(self, name: str) -> bool:
        return self.datasets_to_split == "all" or name in self.datasets_to_split


# -- the driver ---------------------------------------------------------------------------------


def _tables(dataset: Any) -> Iterator:
    """``dataset``'s rows as pyarrow tables: a Ray Dataset's blocks, or a pyarrow Table or pandas DataFrame."""
    import pyarrow as pa

    if isinstance(dataset, pa.Table):
        yield dataset
    elif type(dataset).__module__.startswith("pandas"):
        yield pa.Table.from_pandas(dataset, preserve_index=False)
    elif hasattr(dataset, "iter_batches"):
        yield from dataset.iter_batches(batch_format="pyarrow", batch_size=None)
    else:
        from pcs_ray.train.config import refuse

        raise refuse("TorchTrainer(datasets)", f"a ray.data.Dataset, pyarrow.Table or pandas.DataFrame per name, "
                                               f"got {type(dataset).__name__}")


def fixed_lists(array: np.ndarray):
    """An ndarray of shape (rows, d1, d2, ...) as nested fixed-size lists: plain Arrow, read without Ray."""
    import pyarrow as pa

    values = pa.array(array.reshape(-1))
    for dim in reversed(array.shape[1:]):
        values = pa.FixedSizeListArray.from_arrays(values, int(dim))
    return values


def plain_columns(table):
    """``table`` with Ray Data's tensor columns (Arrow extension types) as nested fixed-size lists, so that a
    rank reads the file with pyarrow alone."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if isinstance(field.type, pa.ExtensionType):
            chunks = [chunk.to_numpy_ndarray() for chunk in table.column(i).chunks]
            if any(c.dtype == object for c in chunks):
                from pcs_ray.train.config import refuse

                raise refuse("TorchTrainer(datasets)", f"column {field.name!r} holds tensors of varying shapes; "
                                                       "give each row's tensor one shape")
            table = table.set_column(i, field.name, pa.chunked_array([fixed_lists(c) for c in chunks]))
    return table


def write_dataset(dataset: Any, path: str | Path) -> int:
    """Write ``dataset`` to the Arrow IPC file ``path`` (block by block, uncompressed so that it maps);
    returns its row count."""
    import pyarrow as pa

    rows, writer, schema = 0, None, None
    try:
        for table in _tables(dataset):
            table = plain_columns(table)
            if writer is None:
                schema = table.schema.remove_metadata()
                writer = pa.ipc.new_file(str(path), schema)
            elif table.schema != schema:
                table = table.cast(schema)
            writer.write_table(table)
            rows += table.num_rows
        if writer is None:  # no block at all: an empty dataset with its schema where it has one
            known = getattr(dataset, "schema", lambda: None)()
            writer = pa.ipc.new_file(str(path), known.base_schema if hasattr(known, "base_schema") else pa.schema([]))
    finally:
        if writer is not None:
            writer.close()
    return rows


def data_root(status: Mapping) -> str:
    """Where the driver stages datasets: the cluster's storage URI, else its ``STATE_DIR`` (from ``status``)."""
    storage = (status.get("storage") or {}).get("uri")
    if storage:
        return storage
    if status.get("state_dir"):
        return str(status["state_dir"])
    from pcs_ray.train.config import refuse

    raise refuse("TorchTrainer(datasets)", "this coordinator does not say where its files are (no storage nor "
                                           "state_dir in its status); upgrade it, or start it with --storage")


def stage(datasets: Mapping[str, Any], config: DataConfig | None, root: str) -> dict:
    """Materialize ``datasets`` under ``root`` (a storage URI or a local folder); returns the locations the job
    spec carries (its ``datasets``): ``{"token", "root", "datasets": {name: {"key", "rows", "split"}}}``."""
    config = config if config is not None else DataConfig()
    if config.datasets_to_split != "all":
        unknown = sorted(set(config.datasets_to_split) - set(datasets))
        if unknown:
            from pcs_ray.train.config import refuse

            raise refuse("DataConfig(datasets_to_split)", f"{', '.join(unknown)} not among the datasets "
                                                          f"({', '.join(sorted(datasets))})")
    token = uuid.uuid4().hex[:16]
    remote = "://" in root and not root.startswith("file://")
    out = {"token": token, "root": root, "datasets": {}}
    scratch = Path(tempfile.mkdtemp(prefix="pcs-ray-datasets-")) if remote else None
    try:
        for name, dataset in datasets.items():
            if not isinstance(name, str) or not name or "/" in name:
                raise ValueError(f"TorchTrainer(datasets): a dataset's name is a str without '/', got {name!r}")
            key = f"{FOLDER}/{token}/{name}{SUFFIX}"
            if remote:
                rows = write_dataset(dataset, scratch / f"{name}{SUFFIX}")
                _storage(root).upload(key, scratch / f"{name}{SUFFIX}")
            else:
                target = Path(root.removeprefix("file://")) / key
                target.parent.mkdir(parents=True, exist_ok=True)
                rows = write_dataset(dataset, target)
            out["datasets"][name] = {"key": key, "rows": rows, "split": config.split(name)}
    except BaseException:
        unstage(out)
        raise
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return out


def unstage(staged: Mapping | None) -> None:
    """Delete what :func:`stage` wrote (the job has ended: no run reads it again)."""
    if not staged:
        return
    root, prefix = staged["root"], f"{FOLDER}/{staged['token']}"
    if "://" in root and not root.startswith("file://"):
        from pcs_ray.storage import StorageError

        try:
            _storage(root).delete_prefix(prefix)
        except StorageError:
            pass  # only space
    else:
        shutil.rmtree(Path(root.removeprefix("file://")) / prefix, ignore_errors=True)


def _storage(uri: str):
    from pcs_ray.storage import open_storage

    return open_storage(uri)


# -- a rank -----------------------------------------------------------------------------------


def staged_here() -> dict:
    """The job's datasets as its driver staged them (``{}``: none)."""
    raw = os.environ.get(ENV)
    return json.loads(raw) if raw else {}


def local_file(root: str, key: str) -> Path:
    """The dataset's file on this node: in the shared folder, or downloaded once into the node's cache."""
    if not ("://" in root and not root.startswith("file://")):
        return Path(root.removeprefix("file://")) / key
    from pcs_ray.train.remote_store import cache_root

    path = cache_root(root) / key
    if not path.exists():
        part = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
        if not _storage(root).download(key, part):
            raise FileNotFoundError(f"dataset {root.rstrip('/')}/{key}: not in the storage (deleted with its job?)")
        os.replace(part, path)  # several ranks of a node may download it at once: each rename is whole
    return path


def read_table(path: str | Path):
    """The Arrow IPC file ``path`` as a table backed by its memory map."""
    import pyarrow as pa

    return pa.ipc.open_file(pa.memory_map(str(path))).read_all()


def to_numpy(column) -> np.ndarray:
    """A pyarrow column as one ndarray: a list column of equal lengths as one more dimension (as Ray Data
    does), a Ray tensor column as its tensors."""
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if hasattr(array, "to_numpy_ndarray"):
        return array.to_numpy_ndarray()
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or pa.types.is_fixed_size_list(array.type):
        lengths = array.value_lengths().to_numpy(zero_copy_only=False) if len(array) else np.zeros(0, dtype=np.int64)
        if len(array) and (lengths == lengths[0]).all() and array.null_count == 0:
            inner = to_numpy(array.flatten())
            return inner.reshape(len(array), int(lengths[0]), *inner.shape[1:])
    return array.to_numpy(zero_copy_only=False)


def _torch_batch(batch: dict, dtypes: Any, device) -> dict:
    import torch

    out = {}
    for name, values in batch.items():
        dtype = dtypes.get(name) if isinstance(dtypes, Mapping) else dtypes
        if isinstance(values, np.ndarray) and not values.flags.writeable:
            values = values.copy()  # a view of Arrow's buffer: torch wants memory it may write
        tensor = torch.as_tensor(values, dtype=dtype)
        out[name] = tensor if device is None else tensor.to(device)
    return out


class DatasetShard:
    """What ``train.get_dataset_shard(name)`` returns: Ray Data's ``DataIterator`` calls over this rank's
    share of a split dataset (or all of one that is not split). Each ``iter_*`` call is one pass."""

    def __init__(self, name: str, root: str, key: str, rows: int, split: bool) -> None:
        self.name, self.root, self.key, self.rows, self.split = name, root, key, int(rows), bool(split)
        self._table = None
        self._epoch = 0  # of a dataset read whole: its passes, for a shuffle's order

    @property
    def table(self):
        if self._table is None:
            self._table = read_table(local_file(self.root, self.key))
        return self._table

    def _stream(self, batch_size: int, shuffle: bool, seed: int, drop_last: bool):
        from pcs_ray.train.session import current

        stream = current().stream(f"dataset:{self.name}", self.rows, batch_size=batch_size, shuffle=shuffle,
                                  seed=seed, drop_last=drop_last)
        # Each pass may ask its own; the stream keeps its position in samples, and the epoch's order is seeded.
        stream.batch_size, stream.drop_last = int(batch_size), bool(drop_last)
        stream.shuffle, stream.seed = shuffle, seed
        return stream

    def _index_batches(self, batch_size: int | None, drop_last: bool, shuffle_buffer: int | None,
                       seed: int | None) -> Iterator[np.ndarray]:
        """This pass's batches of row indices, the job's position moved as each is handed out."""
        from pcs_ray.train.data_order import DataStream
        from pcs_ray.train.session import current

        shuffle, seed = bool(shuffle_buffer), int(seed or 0)
        context = current().context
        if batch_size is None:  # Ray's "whole blocks": here, this rank's whole share in one batch
            batch_size = max(1, -(-self.rows // (context.world_size if self.split else 1)))
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
        if self.split:
            stream = self._stream(batch_size, shuffle, seed, drop_last)
        else:
            stream = DataStream(self.name, self.rows, seed=seed, shuffle=shuffle, batch_size=batch_size,
                                drop_last=drop_last, state={"epoch": self._epoch, "size": self.rows, "seed": seed})
            self._epoch += 1
        for batch in [b for b in stream.begin() if len(b.indices)]:
            stream.consumed(batch)  # handed out counts: a checkpoint reported after this step includes it
            yield batch.indices
        stream.ended()

    def _rows(self, indices: np.ndarray):
        return self.table.take(indices)

    def iter_batches(self, *, prefetch_batches: int = 1, batch_size: int | None = 256,
                     batch_format: str | None = "default", drop_last: bool = False,
                     local_shuffle_buffer_size: int | None = None, local_shuffle_seed: int | None = None,
                     _collate_fn=None) -> Iterator:
        """One pass of batches: ``"default"``/``"numpy"`` (a dict of ndarrays), ``"pandas"`` or ``"pyarrow"``."""
        if batch_format not in ("default", "numpy", "pandas", "pyarrow", None):
            raise ValueError(f"batch_format: 'default', 'numpy', 'pandas' or 'pyarrow', got {batch_format!r}")
        for indices in self._index_batches(batch_size, drop_last, local_shuffle_buffer_size, local_shuffle_seed):
            table = self._rows(indices)
            if batch_format == "pyarrow":
                yield table
            elif batch_format == "pandas":
                yield table.to_pandas()
            else:
                batch = {name: to_numpy(table.column(name)) for name in table.column_names}
                yield batch if _collate_fn is None else _collate_fn(batch)

    def iter_torch_batches(self, *, prefetch_batches: int = 1, batch_size: int | None = 256, dtypes: Any = None,
                           device: Any = "auto", collate_fn=None, drop_last: bool = False,
                           local_shuffle_buffer_size: int | None = None, local_shuffle_seed: int | None = None,
                           pin_memory: bool = False) -> Iterator:
        """One pass of batches as dicts of tensors on ``device`` (``"auto"``: this rank's), or what
        ``collate_fn`` makes of each dict of ndarrays."""
        import torch

        from pcs_ray.train.session import current

        if device == "auto":
            device = torch.device(current().context.device)
        device = None if device is None or torch.device(device).type == "cpu" else torch.device(device)
        for batch in self.iter_batches(batch_size=batch_size, drop_last=drop_last,
                                       local_shuffle_buffer_size=local_shuffle_buffer_size,
                                       local_shuffle_seed=local_shuffle_seed):
            if collate_fn is not None:
                out = collate_fn(batch)
                if device is not None:
                    from pcs_ray.train.data_loader import to_device

                    out = to_device(out, device)
                yield out
            else:
                yield _torch_batch(batch, dtypes, device)

    def iter_rows(self) -> Iterator[dict]:
        """One pass, row by row."""
        for table in self.iter_batches(batch_format="pyarrow"):
            yield from table.to_pylist()

    def count(self) -> int:
        """Rows this rank reads in a whole epoch (a split dataset's share on this run's world size)."""
        if not self.split:
            return self.rows
        from pcs_ray.train.session import current

        context = current().context
        return len(np.array_split(np.arange(self.rows), context.world_size)[context.world_rank])

    def schema(self):
        return self.table.schema

    def columns(self) -> list[str]:
        return list(self.table.column_names)

    def materialize(self) -> "DatasetShard":
        """Already materialized: itself."""
        return self

    def __repr__(self) -> str:
        return f"DatasetShard({self.name!r}, rows={self.rows}, split={self.split})"


_shards: dict[str, DatasetShard] = {}


def get_dataset_shard(name: str | None = None) -> DatasetShard:
    """This rank's shard of the dataset ``name`` the job was given (``TorchTrainer(datasets=...)``)."""
    staged = staged_here()
    found = staged.get("datasets") or {}
    if name is None and len(found) == 1:
        name = next(iter(found))
    if name not in found:
        given = ", ".join(sorted(found)) or "none"
        raise KeyError(f"get_dataset_shard({name!r}): the job's datasets are {given} (TorchTrainer(datasets=...))")
    key = f"{staged['token']}/{name}"
    if key not in _shards:
        info = found[name]
        _shards[key] = DatasetShard(name, staged["root"], info["key"], info["rows"], info["split"])
    return _shards[key]
