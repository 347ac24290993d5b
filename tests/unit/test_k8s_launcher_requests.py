"""What one launch asks of the API server: the lease Secret and the Job, and nothing the
launch waits for after them. A real HTTP server on loopback plays the API server (slow to
answer the hand-over patches); the launcher and its client are the real ones."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes.client import Configuration

from devenv.waiting import wait_for
from factories import no_database
from k8sfixtures import definition, job_settings, run
from pgsched.k8s.client import api
from pgsched.k8s.client.ratelimit import TokenBucket
from pgsched.k8s.jobside import launcher

PATCH_SECONDS = 0.5


class FakeApiServer(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, dict]] = []
    version = 0

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def do_POST(self) -> None:
        body = self._body()
        FakeApiServer.seen.append(("POST", self.path, body))
        FakeApiServer.version += 1
        name = body["metadata"]["name"]
        self._answer(
            201,
            {
                **body,
                "metadata": {
                    **body["metadata"],
                    "uid": f"uid-{name}",
                    "resourceVersion": str(FakeApiServer.version),
                },
            },
        )

    def do_GET(self) -> None:
        # The namespace, for its jobTemplate policy annotations (none here).
        assert self.path.startswith("/api/v1/namespaces/"), self.path
        self._answer(200, {"metadata": {"name": self.path.rsplit("/", 1)[1]}})

    def do_PATCH(self) -> None:
        body = self._body()
        time.sleep(PATCH_SECONDS)  # an API server busy with a stampede
        FakeApiServer.seen.append(("PATCH", self.path, body))
        self._answer(200, body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def kube():
    FakeApiServer.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    configuration = Configuration()
    configuration.host = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield api.KubeApi(configuration, limiter=TokenBucket(1000, 1000))
    httpd.shutdown()


def test_a_launch_creates_the_secret_and_the_job_and_hands_the_secret_over_later(kube):
    k8s = launcher.KubernetesLauncher(kube, job_settings("pgsched:dev"), connect=no_database)
    started = time.monotonic()
    for run_id in range(1, 6):
        k8s.launch(run(id=run_id), definition())
    took = time.monotonic() - started
    # Five launches do not wait for five slow hand-overs (2.5 s one after another).
    assert took < PATCH_SECONDS, f"5 launches took {took:.2f}s"
    creations = [(method, path.rsplit("/", 1)[1]) for method, path, _ in FakeApiServer.seen]
    assert creations == [("POST", "secrets"), ("POST", "jobs")] * 5

    wait_for(lambda: len(FakeApiServer.seen) == 15, 10, describe=lambda: str(FakeApiServer.seen))
    patches = [body for method, _, body in FakeApiServer.seen if method == "PATCH"]
    # Each names the Secret as its launch left it, so a later claim's rewrite refuses it.
    assert [patch["metadata"]["resourceVersion"] for patch in patches] == ["1", "3", "5", "7", "9"]
    assert [patch["metadata"]["ownerReferences"][0]["kind"] for patch in patches] == ["Job"] * 5
