"""``python -m benchmarks``: run every benchmark, each as ``python -m benchmarks.<name>`` from the
checkout's root; each appends to benchmarks/RESULTS.md."""
import subprocess
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
status = 0
for bench in sorted(here.glob("bench_*.py")):
    print(f"== {bench.name}", flush=True)
    status |= subprocess.call([sys.executable, "-m", f"benchmarks.{bench.stem}"], cwd=here.parent)
sys.exit(status)
