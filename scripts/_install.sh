# Shared by scripts/demo.sh and scripts/test.sh: install warpforge (editable) with one extra.
install_warpforge() {
  local py=$1 extra=$2
  if ! "$py" -c "import torch" 2>/dev/null; then
    # no torch yet: any 2.x from 2.3 works; the upper bound keeps pip on a build that is small
    # where one is available (warpforge itself never pins torch)
    "$py" -m pip install -q "torch>=2.3,<2.14"
  fi
  "$py" -m pip install -q -e ".[$extra]"
}
