import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="session")
def _repo_cwd():
    """Tests use repository-relative paths (configs/, data/)."""
    os.chdir(REPO)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """A real S3-protocol server on loopback (moto's standalone server) with one empty bucket.

    Yields (url_prefix, storage_options) for fsspec/s3fs. The credentials are fake: moto accepts any.
    Skips when moto[server] or s3fs is not installed (`pip install -e '.[test]'` brings both).
    """
    import shutil
    import subprocess
    import sys
    import time
    import urllib.request

    s3fs = pytest.importorskip("s3fs")
    exe = Path(sys.executable).with_name("moto_server")
    server = str(exe) if exe.exists() else shutil.which("moto_server")
    if server is None:
        pytest.skip("moto_server not installed: pip install 'moto[server]'")
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("moto") / "server.log"
    # A clean environment for botocore: no real AWS profile, credentials or proxy may leak into the tests.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and "proxy" not in k.lower()}
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="eu-west-1")
    with open(log, "wb") as out:
        proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.build_opener(urllib.request.ProxyHandler({})).open(endpoint, timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto_server did not start on {endpoint}:\n{log.read_text()[-2000:]}")
                time.sleep(0.1)
        options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing",
                   "client_kwargs": {"region_name": "eu-west-1"}}  # us-east-1 takes no LocationConstraint
        s3fs.S3FileSystem(**options).mkdir("bessemer-test")
        yield "s3://bessemer-test", options
    finally:
        proc.kill()
        proc.wait(timeout=10)
