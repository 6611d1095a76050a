#!/bin/bash
# Issue 44's GPU figures (bench/gpu_envs.py) on the lent GPU machine, which has torch and numpy but not gymnasium.
#   bash bench/gpu_envs.sh --pack     here: copies gymnasium and what it imports (pure Python) into .gpu/envs/site
#   bash bench/gpu_envs.sh            there (device tool: carry [".gpu/envs"], timeout 300): at most about 4 minutes
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
site=$root/.gpu/envs/site
if [ "${1:-}" = "--pack" ]; then
    python=${PYTHON:-$root/.venv/bin/python}
    src=$("$python" -c 'import gymnasium, os; print(os.path.dirname(os.path.dirname(gymnasium.__file__)))')
    rm -rf "$site" && mkdir -p "$site"
    for package in gymnasium farama_notifications cloudpickle yaml; do cp -r "$src/$package" "$site/"; done
    find "$site" \( -name __pycache__ -o -name '*.so' \) -prune -exec rm -rf {} +  # yaml falls back to pure Python
    du -sh "$site"
    exit 0
fi
[ -d "$site" ] || { echo "bench/gpu_envs.sh: no $site; run bash bench/gpu_envs.sh --pack first and carry .gpu/envs"; exit 2; }
export PYTHONPATH="$site:$root" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
echo "cpus $(nproc); $(python3 --version)"
timeout 270 python3 "$root/bench/gpu_envs.py" "$@"
