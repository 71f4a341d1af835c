"""Generates the gRPC stubs of proto/spool/v1 into the build at build time.

The .proto files are the repository's (../../proto), so the package is built
from a checkout of the repository: `pip install ./sdk/python`. Nothing
generated is written to the source tree.
"""

from __future__ import annotations

import glob
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))


def generate(out_dir: str) -> None:
    from grpc_tools import protoc  # build requirement (pyproject.toml)

    protos = sorted(glob.glob(os.path.join(PROTO_ROOT, "spool", "v1", "*.proto")))
    if not protos:
        raise SystemExit(
            f"spool: no .proto files under {PROTO_ROOT}/spool/v1: build the package from a "
            "checkout of the Spool repository (pip install ./sdk/python)"
        )
    os.makedirs(os.path.join(out_dir, "spool", "v1"), exist_ok=True)
    well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[os.path.relpath(p, PROTO_ROOT) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("spool: grpc_tools.protoc failed on " + " ".join(protos))


class BuildWithStubs(build_py):
    def run(self) -> None:
        super().run()
        generate(self.build_lib)


setup(cmdclass={"build_py": BuildWithStubs})
