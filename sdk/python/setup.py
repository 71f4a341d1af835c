"""Builds the distribution `spoolmq` (import name `spool`).

The gRPC stubs are generated from proto/spool/v1 when the package is built,
and the version is the repository's VERSION file. Both live outside this
folder in a checkout (../../proto, ../../VERSION), so the sdist carries a
copy of them (proto/spool/v1/*.proto and VERSION at its top): a wheel builds
from the sdist anywhere, with no checkout. In a checkout the repository's
files win, so an edited .proto is never shadowed by an old copy. Nothing
generated is written to the source tree.
"""

from __future__ import annotations

import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))


def _source(name: str) -> str:
    """The repository's file or folder `name` in a checkout, else the copy
    packed into the sdist (which is HERE when building from it)."""
    in_repo = os.path.join(REPO, name)
    if os.path.exists(os.path.join(REPO, "proto", "spool", "v1")) and os.path.exists(in_repo):
        return in_repo
    packed = os.path.join(HERE, name)
    if os.path.exists(packed):
        return packed
    raise SystemExit(
        f"spoolmq: neither {in_repo} nor {packed} exists: build from a checkout of the Spool "
        "repository or from the spoolmq sdist"
    )


def version() -> str:
    with open(_source("VERSION"), encoding="utf-8") as f:
        return f.read().strip()


def protos() -> list[str]:
    found = sorted(glob.glob(os.path.join(_source("proto"), "spool", "v1", "*.proto")))
    if not found:
        raise SystemExit(f"spoolmq: no .proto files under {_source('proto')}/spool/v1")
    return found


def generate(out_dir: str) -> None:
    from grpc_tools import protoc  # build requirement (pyproject.toml)

    root = _source("proto")
    os.makedirs(os.path.join(out_dir, "spool", "v1"), exist_ok=True)
    well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[os.path.relpath(p, root) for p in protos()],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("spoolmq: grpc_tools.protoc failed on " + " ".join(protos()))
    with open(os.path.join(out_dir, "spool", "_version.py"), "w", encoding="utf-8") as f:
        f.write(f'"""Written by the build from the VERSION file."""\n\nVERSION = "{version()}"\n')


class BuildWithStubs(build_py):
    def run(self) -> None:
        super().run()
        generate(self.build_lib)


class SdistWithProtos(sdist):
    """Packs the .proto files and VERSION beside setup.py."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        for p in protos():
            dst = os.path.join(base_dir, "proto", "spool", "v1", os.path.basename(p))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(p, dst)
        shutil.copyfile(_source("VERSION"), os.path.join(base_dir, "VERSION"))


setup(version=version(), cmdclass={"build_py": BuildWithStubs, "sdist": SdistWithProtos})
