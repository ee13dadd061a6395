# SPDX-License-Identifier: GPL-2.0
# Shared paths of the gdrpeer test rig. Sourced, not run.

GDRPEER_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GDRPEER_CACHE=${GDRPEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gdrpeer}
GDRPEER_TOOLS=$GDRPEER_CACHE/tools
GDRPEER_KSRC=$GDRPEER_CACHE/src/linux-source-7.2
export GDRPEER_ROOT GDRPEER_CACHE GDRPEER_TOOLS GDRPEER_KSRC
export PATH="$GDRPEER_TOOLS/bin:$HOME/.cargo/bin:$PATH"
export LIBCLANG_PATH=/usr/lib/llvm-19/lib
