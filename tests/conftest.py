import os

import pytest

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def pytest_collection_modifyitems(config, items):
    """GPU tests are skipped without CUDA: they must never pass silently on a CPU machine."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
