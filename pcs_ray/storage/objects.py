"""A storage URI opened as a flat store of named objects, through ``pyarrow.fs``, with retries.

``s3://bucket/prefix`` takes its endpoint and credentials from the standard AWS variables of the
process (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``), as
Ray Train does; ``gs://``, ``hdfs://`` and the others ``pyarrow.fs.FileSystem.from_uri`` knows open
the same way, ``file:///path`` (or a plain path) is a folder every node mounts, and any other
scheme goes through fsspec. Keys are ``/``-separated names under the URI's prefix.

A store that does not answer (connection refused, a timeout, a 5xx) is retried with backoff for up
to ``retry_s`` seconds; what is wrong for good (credentials, a missing bucket) is raised at once as
a :class:`StorageError` whose one line says what to set. ``problem`` says what the last failed
attempt met while it is still being retried (a status line), ``None`` once a call succeeds again.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

ENV = "PCS_RAY_STORAGE"
RETRY_ENV = "PCS_RAY_STORAGE_RETRY_S"
DEFAULT_RETRY_S = 180.0
#: Words in a store's error that no retry will mend.
_FOR_GOOD = ("ACCESS_DENIED", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket",
             "NO_SUCH_BUCKET", "INVALID_ACCESS_KEY", "Forbidden", "HTTP status 403")


class StorageError(OSError):
    """The storage refused for good, or stayed unreachable past the retry time; the message is one line."""


def storage_from_env() -> Storage | None:
    """The storage ``$PCS_RAY_STORAGE`` names, or None."""
    uri = os.environ.get(ENV, "").strip()
    return open_storage(uri) if uri else None


def open_storage(uri: str, retry_s: float | None = None) -> Storage:
    """Open ``uri`` (nothing is contacted yet: :meth:`Storage.check` does)."""
    if retry_s is None:
        retry_s = float(os.environ.get(RETRY_ENV, DEFAULT_RETRY_S))
    fs, root = _filesystem(uri)
    return Storage(uri, fs, root.rstrip("/"), retry_s)


def _filesystem(uri: str):
    from pyarrow import fs as pafs

    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file"):
        path = parsed.path if scheme == "file" else uri
        return pafs.LocalFileSystem(), str(Path(path).expanduser().resolve())
    if scheme in ("s3", "s3a") and not parsed.query:
        if not parsed.netloc:
            raise StorageError(f"storage {uri!r}: no bucket (s3://BUCKET/PREFIX)")
        return _s3(), f"{parsed.netloc}{parsed.path}"
    try:
        return pafs.FileSystem.from_uri(uri)
    except Exception as arrow_error:  # a scheme pyarrow lacks: fsspec's
        try:
            import fsspec

            fs, path = fsspec.core.url_to_fs(uri)
        except Exception:
            raise StorageError(f"storage {uri!r}: cannot open it ({arrow_error})") from None
        return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


def _s3():
    from pyarrow import fs as pafs

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    # A store that went away mid-connection is noticed within request_timeout (the longest wait for its bytes).
    options = {"connect_timeout": 5.0, "request_timeout": 10.0,
               "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=2)}
    if endpoint:
        found = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
        options.update(endpoint_override=found.netloc, scheme=found.scheme or "https")
        region = region or "us-east-1"
    if region:
        options["region"] = region
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        options.update(access_key=key, secret_key=secret, session_token=os.environ.get("AWS_SESSION_TOKEN"))
    return pafs.S3FileSystem(**options)


class Storage:
    """Objects under one prefix of one file system; every call retried as the module says."""

    def __init__(self, uri: str, fs, root: str, retry_s: float = DEFAULT_RETRY_S):
        self.uri, self.fs, self.root, self.retry_s = uri, fs, root, retry_s
        self.problem: str | None = None
        self.local = type(fs).__name__ == "LocalFileSystem"

    def __repr__(self) -> str:
        return f"Storage({self.uri!r})"

    def __reduce__(self):  # a file system handle does not travel; the URI does, opened again where it lands
        return (open_storage, (self.uri, self.retry_s))

    def path(self, key: str) -> str:
        return f"{self.root}/{key.lstrip('/')}" if key else self.root

    def url(self, key: str) -> str:
        """The URI of ``key`` (what a user sees: ``Result.path``)."""
        return f"{self.uri.rstrip('/')}/{key.lstrip('/')}"

    # -- retries ------------------------------------------------------------------------------
    def _call(self, what: str, fn):
        deadline = time.monotonic() + self.retry_s
        delay = 0.2
        while True:
            try:
                out = fn()
                self.problem = None
                return out
            except FileNotFoundError:
                raise
            except OSError as exc:  # pyarrow's network errors are OSErrors
                text = " ".join(str(exc).split())
                if any(word in text for word in _FOR_GOOD):
                    raise StorageError(f"storage {self.uri}: {what} refused: {_short(text)} "
                                       f"(check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and the bucket)") from None
                self.problem = f"storage {self.uri} unreachable ({what}): {_short(text)}; retrying"
                if time.monotonic() + delay > deadline:
                    raise StorageError(f"storage {self.uri} unreachable: {what} failed for {self.retry_s:.0f} s: "
                                       f"{_short(text)}") from None
                time.sleep(delay * (0.5 + random.random()))
                delay = min(5.0, delay * 2)

    # -- objects ------------------------------------------------------------------------------
    def read(self, key: str) -> bytes | None:
        """The object's bytes, or None where there is none."""
        def get():
            try:
                with self.fs.open_input_file(self.path(key)) as f:  # its size known: one read, not 256 KiB GETs
                    return f.read()
            except FileNotFoundError:
                return None
            except OSError as exc:
                if "does not exist" in str(exc) or "NoSuchKey" in str(exc) or "NOT_FOUND" in str(exc):
                    return None
                raise
        return self._call(f"read {key}", get)

    def write(self, key: str, data: bytes) -> None:
        """Replace the object whole: a reader sees the old bytes or the new, never a part."""
        target = self.path(key)

        def put():
            if self.local:
                parent = target.rsplit("/", 1)[0]
                self.fs.create_dir(parent, recursive=True)
                partial = f"{parent}/.{uuid.uuid4().hex}.partial"
                with self.fs.open_output_stream(partial) as f:
                    f.write(data)
                self.fs.move(partial, target)
            else:
                with self.fs.open_output_stream(target) as f:
                    f.write(data)
        self._call(f"write {key}", put)

    def upload(self, key: str, local: str | Path) -> None:
        self.write(key, Path(local).read_bytes())

    def download(self, key: str, local: str | Path) -> bool:
        """Copy the object to ``local`` (False: there is none)."""
        data = self.read(key)
        if data is None:
            return False
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        Path(local).write_bytes(data)
        return True

    def list(self, prefix: str) -> dict[str, int]:
        """Every object under ``prefix`` (recursively): key relative to the storage root -> size."""
        from pyarrow import fs as pafs

        base = self.path(prefix).rstrip("/")

        def ls():
            try:
                infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
            except FileNotFoundError:
                return {}
            skip = len(self.root) + 1
            return {i.path[skip:]: i.size for i in infos if i.type == pafs.FileType.File
                    and not i.base_name.endswith(".partial")}
        return self._call(f"list {prefix}", ls)

    def delete(self, keys) -> None:
        for key in keys:
            def rm(key=key):
                try:
                    self.fs.delete_file(self.path(key))
                except FileNotFoundError:
                    pass
            self._call(f"delete {key}", rm)

    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under ``prefix`` at once (one by one, an object store keeps an empty marker per
        folder emptied)."""
        def rm():
            try:
                self.fs.delete_dir(self.path(prefix).rstrip("/"))
            except FileNotFoundError:
                pass
        self._call(f"delete {prefix}", rm)

    def check(self) -> None:
        """Write, read and delete a probe object: the one-line error a wrong setting gives, before anything runs."""
        key = f".pcs-ray-probe-{uuid.uuid4().hex[:12]}"
        try:
            self.write(key, b"ok")
            if self.read(key) != b"ok":
                raise StorageError(f"storage {self.uri}: a probe object did not read back")
            self.delete([key])
        except StorageError as exc:
            raise StorageError(f"{exc} (set AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and "
                               f"AWS_REGION on every node, and create the bucket)" if "refused" not in str(exc)
                               else str(exc)) from None


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
