"""A real S3-compatible HTTP server on loopback for the S3 tier's tests: moto's
server mode (`moto_server`, installed with the dev dependencies), started by the
test as its own process. `pause()` / `resume()` (SIGSTOP / SIGCONT) make the
endpoint hang without losing what it stores; `stop()` makes it refuse connections.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.support.polling import wait_until
from tests.support.ports import free_ports

# Credentials moto accepts; the tier reads them from the standard AWS environment.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}


class S3Server:
    def __init__(self, log_path: Path) -> None:
        self.port = free_ports(1)[0]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> S3Server:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log, stderr=log, env={**os.environ, **CREDENTIALS})
        wait_until(self._answers, 30.0, f"the S3 server on {self.endpoint}", interval_s=0.1)
        return self

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"moto_server exited: {self.log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=1):
                return True
        except OSError:
            return False

    def create_bucket(self, bucket: str) -> None:
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=bucket)

    def url(self, bucket: str, prefix: str = "") -> str:
        return f"s3://{bucket}/{prefix}?endpoint={self.endpoint}&region=us-east-1"

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@contextlib.contextmanager
def running_s3(log_path: Path) -> Iterator[S3Server]:
    """A started server, with this process's AWS environment set to its credentials
    (for the test's own reads of the tier) and restored afterwards."""
    server = S3Server(log_path).start()
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    try:
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
