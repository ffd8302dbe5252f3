"""Where a cluster keeps what outlives one machine: object storage (or any folder every node mounts), by URI.

``--storage s3://bucket/prefix`` (``$PCS_RAY_STORAGE``) holds every job's checkpoints, the ranks' logs
and metrics, and a mirror of the coordinator's journal, so that no node's disk is needed after it is
gone. Without it everything stays under the coordinator's ``STATE_DIR`` on one machine, as before.

Standard library and pyarrow only (no Ray, no torch): the rank processes import it.
"""

from pcs_ray.storage.objects import Storage, StorageError, open_storage, storage_from_env

__all__ = ["Storage", "StorageError", "open_storage", "storage_from_env"]
