# Sourced by the device scripts: warpforge from this checkout, and a bubblewrap for the sandbox.
# An offline machine without bubblewrap uses the unpacked Debian package in .sandbox/ (made here
# with `apt-get download bubblewrap libcap2 libselinux1 libpcre2-8-0` and `dpkg -x` into .sandbox/root).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
if ! command -v bwrap >/dev/null 2>&1 && [ -x .sandbox/root/usr/bin/bwrap ]; then
  if .sandbox/root/usr/bin/bwrap --version >/dev/null 2>&1; then
    export WARPFORGE_BWRAP=$PWD/.sandbox/root/usr/bin/bwrap
  else  # its libraries are missing here: a wrapper finds them in the unpacked packages
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$PWD/.sandbox/root/lib/x86_64-linux-gnu:$PWD/.sandbox/root/usr/lib/x86_64-linux-gnu" \
      "$PWD/.sandbox/root/usr/bin/bwrap" > /tmp/bwrap && chmod +x /tmp/bwrap && export WARPFORGE_BWRAP=/tmp/bwrap
  fi
fi
carried_wheels() {  # wheels carried in .whl/ (nvmath-python; an offline machine), installed into /tmp/site
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
    export PYTHONPATH=$PYTHONPATH:/tmp/site
  fi
  if [ -d /tmp/site/cutlass_library ]; then export WARPFORGE_CUTLASS_INCLUDE=/tmp/site/cutlass_library/source/include; fi
}
step() { echo; echo "== $(date -u +%H:%M:%S) $*"; }
gpu_facts() {  # the machine's facts, to $1
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  "${WARPFORGE_BWRAP:-bwrap}" --version
  python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  python3 -c "from warpforge.evaluate import jail; print('sandbox problem:', jail.problem())"
} 
throughput_stages() {  # $1 = the run's folder, $2 = its name: 8 relu candidates (4 Triton, 4 PyTorch), stage times
  timeout 150 python3 benchmarks/throughput.py --out "$1/$2" --skip-serial --families triton,pytorch --limit 4 \
    > "$1/$2.log" 2>&1
  rm -rf "$1/$2/corpus"
  python3 benchmarks/throughput.py --out "$1/x" --summarise "$1/$2" | python3 -c \
    'import json,sys; print(json.dumps(json.load(sys.stdin)["stages"], indent=1))' | tee "$1/$2_summary.json"
}
