"""A local Cloud Storage server for tests: gcp-storage-emulator with GCS's generation preconditions.

TensorStore (Orbax's array writer) relies on what the emulator leaves out: `ifGenerationMatch` /
`ifGenerationNotMatch` on reads, writes and deletes, and the `x-goog-generation` header of a download.
"""
from collections.abc import Callable
from http import HTTPStatus
import socket

from gcp_storage_emulator import server
from gcp_storage_emulator.exceptions import NotFound
import pytest


def _with_preconditions(method: str, handler: Callable) -> Callable:
  def handle(request, response, storage, *args, **kwargs):
    bucket = request.params["bucket_name"]
    name = request.params.get("object_id") or request.query.get("name", [None])[0]
    try:
      generation = storage.get_file_obj(bucket, name)["generation"] if name else None
    except NotFound:
      generation = None
    match, not_match = request.query.get("ifGenerationMatch"), request.query.get("ifGenerationNotMatch")
    if match and match[0] != (generation or "0"):
      response.status = HTTPStatus.PRECONDITION_FAILED
      return None
    if not_match and generation is not None and not_match[0] == generation:
      response.status = HTTPStatus.NOT_MODIFIED
      return None
    if method == server.GET and generation is not None:
      response["x-goog-generation"] = generation
    return handler(request, response, storage, *args, **kwargs)
  return handle


def start(monkeypatch: pytest.MonkeyPatch, bucket: str) -> tuple[server.Server, str]:
  """Starts a server on a free localhost port holding `bucket`: (the server, its URL)."""
  for route, handlers in server.HANDLERS:
    for method in (server.GET, server.POST, server.DELETE):
      if method in handlers and ("object_id" in route or route.endswith("/o$")):
        monkeypatch.setitem(handlers, method, _with_preconditions(method, handlers[method]))
  with socket.socket() as probe:
    probe.bind(("localhost", 0))
    port = probe.getsockname()[1]
  gcs = server.create_server("localhost", port, in_memory=True, default_bucket=bucket)
  gcs.start()
  return gcs, f"http://localhost:{port}"
