import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="session")
def _repo_cwd():
    """Tests use repository-relative paths (configs/, data/)."""
    os.chdir(REPO)
