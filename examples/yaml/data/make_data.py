"""Write the small bundled inputs of the YAML examples (run from the repository root).

``purchases.csv``: 4000 purchases (``user_id``, ``item``) by 400 users, items drawn from a
Zipf-like law over 30 items, each user buying 1 to 20 items. ``events.jsonl``: 1500 page views
(``ts`` in Unix seconds over three minutes, ``page``, ``latency_ms``) with Zipf-like pages and
log-normal latencies. Synthetic and seeded: the files are reproduced byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ITEMS = [f"item-{i:02d}" for i in range(30)]
PAGES = ["/home", "/search", "/cart", "/checkout", "/help", "/about", "/login", "/account"]
# 2025-11-28 12:00:00 UTC: three one-minute windows start here.
T0 = 1_764_331_200


def zipf_weights(n: int, s: float = 1.1) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()


def main() -> None:
    rng = np.random.default_rng(2026)
    rows = []
    user = 0
    while len(rows) < 4000:
        user += 1
        for item in rng.choice(len(ITEMS), size=int(rng.integers(1, 21)), p=zipf_weights(30)):
            rows.append(f"u{user:04d},{ITEMS[item]}")
    (HERE / "purchases.csv").write_text("user_id,item\n" + "\n".join(rows[:4000]) + "\n")

    times = np.sort(rng.uniform(T0, T0 + 180, size=1500))
    pages = rng.choice(len(PAGES), size=1500, p=zipf_weights(len(PAGES), 1.0))
    latency = rng.lognormal(mean=4.5, sigma=0.6, size=1500)
    with (HERE / "events.jsonl").open("w") as f:
        for t, page, ms in zip(times, pages, latency, strict=True):
            f.write(
                json.dumps(
                    {
                        "ts": round(float(t), 2),
                        "page": PAGES[page],
                        "latency_ms": round(float(ms), 1),
                    }
                )
                + "\n"
            )


if __name__ == "__main__":
    main()
