"""Launchers that place rlvr's processes on a cluster (``rlvr launch``): `rlvr.launch.slurm`."""
