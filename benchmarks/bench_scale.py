"""Cost against input size and distinct keys, through the command line.

``python -m benchmarks.run --only Scale``: ``beam-dpsketch heavy-hitters`` (its default
release), ``frequencies`` and ``quantiles`` on Parquet files of int64 keys, each in a fresh
process timed by ``/usr/bin/time`` (wall seconds and peak resident memory):

* 1 M, 10 M and 100 M rows of Zipf(1.1) keys folded onto 10^4 distinct values;
* 10 M rows with 10^4 and with 10^7 distinct keys (each key about once: a permutation).

Memory should stay flat in the distinct keys and grow at most slowly with the rows (the reader's
batches), time linearly in the rows. ``--quick`` drops the 100 M-row file.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

COMMANDS = {
    "heavy-hitters": ["--column", "key", "--key-type", "int", "--epsilon", "1", "--top", "10"],
    "frequencies": ["--column", "key", "--key-type", "int", "--epsilon", "1", "--query", "1"],
    "quantiles": [
        "--column",
        "key",
        "--epsilon",
        "1",
        "--lower",
        "0",
        "--upper",
        "10000000",
        "--q",
        "0.5",
    ],
}


def _write(path: Path, rows: int, distinct: int, seed: int) -> None:
    """``rows`` int64 keys in chunks (bounded memory while writing); benchmark data only."""
    rng = np.random.default_rng(seed)
    chunk = 5_000_000
    schema = pa.schema([("key", pa.int64())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            if distinct >= rows:
                keys = np.arange(start, start + n, dtype=np.int64)
                rng.shuffle(keys)
            else:
                keys = rng.zipf(1.1, n).astype(np.int64) % distinct
            writer.write_table(pa.table({"key": keys}, schema=schema))


def _run(command: str, path: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one CLI run in a fresh process."""
    cli = [sys.executable, "-m", "beam_dpsketch.pipelines.cli", command, "--input", str(path)]
    argv = ["/usr/bin/time", "-f", "%M", *cli, *COMMANDS[command], "--format", "json"]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{command} failed: {proc.stderr.strip().splitlines()[-2:]}")
    peak_kib = int(proc.stderr.strip().splitlines()[-1])
    return seconds, peak_kib / 1024


def run(quick: bool = False) -> list[dict]:
    cases = [(1_000_000, 10_000), (10_000_000, 10_000), (10_000_000, 10_000_000)]
    if not quick:
        cases.append((100_000_000, 10_000))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (n, distinct) in enumerate(cases):
            path = Path(tmp) / f"keys_{n}_{distinct}.parquet"
            _write(path, n, distinct, seed=i)
            for command in COMMANDS:
                seconds, peak = _run(command, path)
                print(
                    f"  {command:<14} {n:>11,} rows {distinct:>11,} keys {seconds:7.1f} s "
                    f"{peak:7.0f} MiB",
                    file=sys.stderr,
                )
                rows.append(
                    {
                        "command": command,
                        "rows": f"{n:,}",
                        "distinct_keys": f"{distinct:,}",
                        "seconds": round(seconds, 1),
                        "rows_per_s": f"{n / seconds / 1e6:.2f} M",
                        "peak_rss_mib": round(peak),
                    }
                )
            path.unlink()
    return rows


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(row)
