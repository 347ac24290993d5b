"""The cluster's start warns when the pgsched image it would import is not the current
sources' (``hack/images/build.sh --check``, called by ``ControlPlane.add_node``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devenv.binaries import StaleImageWarning, warn_if_images_stale


def test_an_index_listing_an_older_pgsched_image_is_reported_with_the_fix(tmp_path, monkeypatch):
    images = tmp_path / "images"
    images.mkdir()
    older = images / "pgsched-0000000000000000.tar"
    (images / "index").write_text(f"{older} ghcr.io/pgsched/pgsched:0.1.0\n")
    monkeypatch.setenv("PGSCHED_CACHE_DIR", str(tmp_path))
    with pytest.warns(StaleImageWarning, match=r"current sources .* run `make images`"):
        warn_if_images_stale()


def test_no_index_at_all_is_reported_too(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PGSCHED_CACHE_DIR", str(tmp_path))
    with pytest.warns(StaleImageWarning, match="make images"):
        warn_if_images_stale()
