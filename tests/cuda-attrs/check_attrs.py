#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""check_attrs: libcuda-sim's device attribute table against CUDA's own cuda.h.

cuda.h comes from NVIDIA's wheel nvidia-cuda-runtime-cu12 on PyPI (pinned
version and SHA-256; include/cuda.h is in it), fetched once with
`pip download --no-deps` into $GDRPEER_CACHE/cuda-headers/VERSION/ (default
GDRPEER_CACHE: ${XDG_CACHE_HOME:-$HOME/.cache}/gdrpeer); only cuda.h is
kept, so later runs need no network. The comparison is the ignored cargo test
attributes::tests::table_matches_cuda_h of libcuda-sim, given cuda.h through
LIBCUDA_SIM_CUDA_H: it parses every CU_DEVICE_ATTRIBUTE_* of
CUdevice_attribute_enum, aliases included, and fails listing each name and
number that the table and cuda.h do not share, and a different
CU_DEVICE_ATTRIBUTE_MAX.

  check_attrs.py               fetch cuda.h if missing, run the test
  check_attrs.py --fetch-only  fetch cuda.h if missing, print its path

Exit status: 0 the table matches, 1 it does not (or cargo failed), 2 cuda.h
could not be had (no pip: Debian's python3-pip; no network; a changed wheel).
"""

import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "nvidia-cuda-runtime-cu12"
# CUDA 12.9, the last 12.x: its cuda.h defines CUDA_VERSION 12090.
VERSION = "12.9.79"
WHEEL_SHA256 = "25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3"
MEMBER = "nvidia/cuda_runtime/include/cuda.h"
PLATFORM = "manylinux2014_x86_64"
TEST = "attributes::tests::table_matches_cuda_h"

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cache_dir():
    base = os.environ.get("GDRPEER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gdrpeer"
    )
    return pathlib.Path(base) / "cuda-headers" / VERSION


def fail(msg):
    print(f"check_attrs: {msg}", file=sys.stderr)
    sys.exit(2)


def fetch(dest):
    """Downloads the pinned wheel, checks its hash and keeps its cuda.h as `dest`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
               "--only-binary=:all:", "--platform", PLATFORM,
               "--disable-pip-version-check", "--quiet",
               "--dest", tmp, f"{PACKAGE}=={VERSION}"]
        r = subprocess.run(cmd, check=False)
        if r.returncode != 0:
            fail(f"pip download {PACKAGE}=={VERSION} failed (status {r.returncode}; "
                 "pip: Debian's python3-pip)")
        wheels = list(pathlib.Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            fail(f"expected one wheel, got {[w.name for w in wheels]}")
        digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
        if digest != WHEEL_SHA256:
            fail(f"{wheels[0].name}: SHA-256 {digest}, pinned {WHEEL_SHA256}")
        with zipfile.ZipFile(wheels[0]) as z:
            text = z.read(MEMBER)
        part = dest.with_suffix(".part")
        part.write_bytes(text)
        part.replace(dest)


def main():
    args = sys.argv[1:]
    if args not in ([], ["--fetch-only"]):
        print(__doc__, file=sys.stderr)
        return 2
    cuda_h = cache_dir() / "cuda.h"
    if not cuda_h.is_file():
        fetch(cuda_h)
    if args:
        print(cuda_h)
        return 0
    env = dict(os.environ, LIBCUDA_SIM_CUDA_H=str(cuda_h))
    cmd = ["cargo", "test", "--locked", "-p", "libcuda-sim", "--lib", "--",
           "--ignored", "--exact", TEST, "--nocapture"]
    r = subprocess.run(cmd, cwd=ROOT / "userspace", env=env, check=False)
    return 0 if r.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
