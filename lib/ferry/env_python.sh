#!/bin/sh
# bin/python of Ferry's shipped environment: starts the node's own python3.X with the packages
# packed for it (lib/python3.X/site-packages), or says in one line why it cannot. Written by
# lib/ferry/packaging.py, which fills in the glibc floor it measured and the minors it packed.
# FERRY_PYTHON_MINOR: the minor to prefer (the driver's: PySpark refuses workers of another);
# FERRY_NODE_PYTHON: the interpreter to use, where python3.X is not on PATH.
FLOOR=@FLOOR@
PYTHONS="@PYTHONS@"
env_dir=$(cd "$(dirname "$0")/.." && pwd -P)
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | sed -n 's/^glibc //p')
[ -n "$glibc" ] || glibc=$(ldd --version 2>/dev/null | sed -n '1s/.* \([0-9][0-9]*\.[0-9][0-9]*\)$/\1/p')
older() {  # older A B: version A is below version B
  [ "${1%%.*}" -lt "${2%%.*}" ] || { [ "${1%%.*}" -eq "${2%%.*}" ] && [ "${1#*.}" -lt "${2#*.}" ]; }
}
py=""
if [ -n "${glibc:-}" ] && ! older "$glibc" "$FLOOR"; then
  for v in ${FERRY_PYTHON_MINOR:-} $PYTHONS; do
    case " $PYTHONS " in *" $v "*) ;; *) continue ;; esac
    if [ -n "${FERRY_NODE_PYTHON:-}" ]; then
      have=$("$FERRY_NODE_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
      [ "$have" = "$v" ] && py=$FERRY_NODE_PYTHON
    else
      py=$(command -v "python$v")
      if [ -z "$py" ] && command -v python3 >/dev/null 2>&1; then
        have=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
        [ "$have" = "$v" ] && py=$(command -v python3)
      fi
    fi
    [ -n "$py" ] && break
  done
fi
if [ -z "$py" ]; then
  node=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || echo none)
  wanted=$(echo $PYTHONS | sed 's/ / or /g')
  echo "error: Ferry's environment needs glibc $FLOOR or newer and Python $wanted" \
    "(python3.X on PATH, or FERRY_NODE_PYTHON); node $(hostname 2>/dev/null) has" \
    "glibc ${glibc:-none} and python3 $node${FERRY_NODE_PYTHON:+ (FERRY_NODE_PYTHON=$FERRY_NODE_PYTHON)}" >&2
  exit 1
fi
PYTHONPATH="$env_dir/lib/python$v/site-packages${PYTHONPATH:+:$PYTHONPATH}"
PYTHONNOUSERSITE=1
export PYTHONPATH PYTHONNOUSERSITE
exec "$py" "$@"
