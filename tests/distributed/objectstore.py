"""An S3-compatible server on localhost for tests: moto's server mode as a child process.

`moto_server` (from the test extra) listens on 127.0.0.1 and a free port, waited for with a
bound; the test stops it by pid. It keeps objects in memory, so every bucket is gone when it
stops. Any access key and secret are accepted.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from corpusgraph.config import S3Section
from corpusgraph.storage.locations import arrow_filesystem
from tests.distributed.cluster import VENV_BIN, Daemons, free_ports, port_open, wait_until


def moto_server_command() -> str | None:
    """The venv's moto_server, else one on PATH; None when moto[server] is not installed."""
    own = VENV_BIN / "moto_server"
    return str(own) if own.exists() else shutil.which("moto_server")


class MotoServer:
    """moto_server on 127.0.0.1 with one bucket made; `with MotoServer(logs) as s3:` yields its settings.

    Started and stopped like the cluster's daemons (cluster.Daemons): its own process group,
    stopped by pid, its log at <logs>/moto.log.
    """

    def __init__(self, logs: Path, bucket: str = "corpusgraph", start_limit_s: float = 60):
        self.daemons = Daemons(logs, {**os.environ, "PYTHONUNBUFFERED": "1"})
        self.bucket, self.start_limit_s = bucket, start_limit_s
        self.port: int | None = None

    @property
    def settings(self) -> S3Section:
        return S3Section(endpoint=f"http://127.0.0.1:{self.port}", region="us-east-1",
                         access_key="testing", secret_key="testing", path_style=True)

    def start(self) -> "MotoServer":
        cmd = moto_server_command()
        if cmd is None:
            raise FileNotFoundError("moto_server is not installed: `make setup` installs the test extra")
        (self.port,) = free_ports(1)
        try:
            proc, log = self.daemons.start("moto", [cmd, "-H", "127.0.0.1", "-p", str(self.port)])
            wait_until(lambda: port_open(self.port), "moto_server listening", self.start_limit_s, proc, log)
            s3, path = arrow_filesystem(f"s3://{self.bucket}", self.settings, create_buckets=True)
            s3.create_dir(path)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.daemons.stop()

    def __enter__(self) -> S3Section:
        return self.start().settings

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":  # a manual check: start, make the bucket, list it, stop
    with MotoServer(Path(sys.argv[1] if len(sys.argv) > 1 else ".")) as s3:
        fs, _ = arrow_filesystem("s3://corpusgraph", s3)
        print(s3.endpoint, fs.get_file_info("corpusgraph"))
