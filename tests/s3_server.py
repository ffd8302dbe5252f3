"""A real S3 endpoint for tests: moto's ``ThreadedMotoServer`` over HTTP, as Ray's own tests use.

``s3_server`` starts one for the session on loopback; ``s3_bucket`` makes a fresh bucket and points the
standard AWS variables at the server for the test (what every node of a cluster would set), yielding
``s3://<bucket>/<prefix>``.
"""

from __future__ import annotations

import socket
import uuid

import pytest


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class S3Server:
    """moto's S3 server on ``host:port``; stopped and started again on the same port, its buckets kept."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None):
        from moto.server import ThreadedMotoServer

        self.host, self.port = host, port or free_port(host)
        self.server = ThreadedMotoServer(ip_address=host, port=self.port, verbose=False)
        self.running = False

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"}

    def start(self) -> None:
        if not self.running:
            from moto.server import ThreadedMotoServer

            self.server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
            self.server.start()
            self.running = True

    def stop(self) -> None:
        if self.running:
            self.server.stop()
            self.running = False

    def bucket(self) -> str:
        import boto3

        name = f"pcs-ray-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                     region_name="us-east-1").create_bucket(Bucket=name)
        return name


@pytest.fixture(scope="session")
def s3_server():
    server = S3Server()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server, monkeypatch):
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return f"s3://{s3_server.bucket()}/cluster"
