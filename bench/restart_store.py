"""Does a process that torchrun restarts see the keys its dead predecessor wrote in the rendezvous store?

One worker under `torchrun --standalone --max-restarts 1`: the first attempt writes a key into the store that
`torch.distributed.rendezvous("env://")` gives it, then dies; the restarted attempt checks whether the key is there.
The answer depends on the PyTorch version (how the agent hands its store to its workers); chapter 8, part 2 renders it.

    python bench/restart_store.py      # writes bench/results/restart_store-<machine>.json
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug  # noqa: E402

KEY = "written_by_attempt_0"


def worker(out: str) -> None:
    import torch.distributed as dist
    store, rank, world = next(dist.rendezvous("env://"))
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if attempt == 0:
        store.set(KEY, "an address that dies with this process")
        os._exit(1)                                               # a lost worker: the agent restarts the group
    rec = {"attempt": attempt, "old_key_seen": store.check([KEY]),
           "agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE")}
    Path(out).write_text(json.dumps(rec) + "\n")


def main() -> None:
    out = Path(tempfile.mkdtemp(prefix="restart-store-")) / "attempt1.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", "--max-restarts", "1",
           __file__, "worker", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if r.returncode != 0 or not out.is_file(): raise SystemExit(f"the restarted worker did not finish:\n{r.stderr[-3000:]}")
    m = machine()
    res = {"benchmark": "restart_store", "machine": m, "launcher": "torchrun --standalone --max-restarts 1",
           **json.loads(out.read_text())}
    path = Path(__file__).parent / "results" / f"restart_store-{slug(m, 'cpu')}.json"
    path.write_text(json.dumps(res, indent=1) + "\n")
    print(res); print(f"wrote {path}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]: worker(sys.argv[2])
    else: main()
