"""Training kernel-writing models on warpforge rewards (CUDA-L1's pipeline): datasets from the
archive (data.py), a tiny model for tests (tiny.py), TRL recipes (recipes.py), `warpforge train`."""
