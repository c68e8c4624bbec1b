"""The workers of ``local_dask_cluster`` (the command line's ``--dask-workers N``) allocate as
this process does.

Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536`` in its workers' environment by default. That
turns off glibc's adaptive ``mmap`` threshold: every numpy temporary above 128 KiB is mapped and
unmapped again, and the Count Sketch update of 10^7 int keys that takes 0.3 s in process took
1.7 s in a worker. The cluster runs in a fresh interpreter whose environment does not set the
variable, as the command line's would (an earlier cluster of this test process may have set it
here, and children inherit it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("distributed")

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, os
import distributed
from beam_dpsketch.pipelines.runner import local_dask_cluster

def trim_threshold():
    return os.environ.get("MALLOC_TRIM_THRESHOLD_")

if __name__ == "__main__":
    with local_dask_cluster(1) as address, distributed.Client(address) as client:
        print(json.dumps(list(client.run(trim_threshold).values())))
"""


def test_local_cluster_workers_keep_glibc_adaptive_mmap_threshold(tmp_path: Path):
    script = tmp_path / "workers_env.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [None]
