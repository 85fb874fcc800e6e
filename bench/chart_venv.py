"""Where the benchmark reports draw their charts: matplotlib from a venv of their own
(NEVERWIPED_BENCH_VENV, by default ~/.cache/neverwiped-bench/venv), made on first use, so the
system's Python is left as it is."""
import os
import subprocess
import sys


def drawn_in_venv(script, out, name):
    """None when this process runs in the venv and may import matplotlib; otherwise runs
    `SCRIPT --chart-only OUT` there, making the venv first if needed, and says whether it drew."""
    if os.environ.get("NEVERWIPED_BENCH_IN_VENV") == "1":
        return None
    venv = os.path.expanduser(os.environ.get("NEVERWIPED_BENCH_VENV", "~/.cache/neverwiped-bench/venv"))
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        print(f"{name}: installing matplotlib into {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "matplotlib"], check=True)
    env = dict(os.environ, NEVERWIPED_BENCH_IN_VENV="1")
    return subprocess.run([python, os.path.abspath(script), "--chart-only", out], env=env).returncode == 0
