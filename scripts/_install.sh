# Shared by scripts/demo.sh and scripts/test.sh: install warpforge (editable) with one extra, and
# bubblewrap, the OS sandbox every candidate process runs in (docs/evaluation.md).
install_warpforge() {
  local py=$1 extra=$2
  if ! "$py" -c "import torch" 2>/dev/null; then
    # no torch yet: any 2.x from 2.3 works; the upper bound keeps pip on a build that is small
    # where one is available (warpforge itself never pins torch)
    "$py" -m pip install -q "torch>=2.3,<2.14"
  fi
  "$py" -m pip install -q -e ".[$extra]"
  install_sandbox
}

install_sandbox() {
  if [ -n "${WARPFORGE_BWRAP:-}" ] || command -v bwrap >/dev/null 2>&1; then
    return 0
  fi
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) >/dev/null
  elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) >/dev/null
  else
    echo "warning: bubblewrap (bwrap) is not installed and could not be installed here: install it with your" \
         "package manager (e.g. apt-get install bubblewrap, dnf install bubblewrap) or warpforge stops;" \
         "--no-sandbox runs candidates unsandboxed" >&2
  fi
}
