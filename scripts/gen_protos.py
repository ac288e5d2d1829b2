"""Regenerate the Python protobuf modules under ``nri_plrm/proto/`` from every ``protos/**.proto``.

Every ``.proto`` is compiled with its own directory as the only include path, so each file must be
self-contained (no imports of other project protos). Output is flat: ``protos/<dir>/<name>.proto``
becomes ``nri_plrm/proto/<name>_pb2.py`` plus ``<name>_pb2.pyi``. Services get no generated
stubs: NRI services are spoken over our own ttrpc codec, and the PodResources server registers
its methods with grpcio's generic handlers.

Usage: ``python scripts/gen_protos.py [--out DIR]`` (default: ``nri_plrm/proto`` of this repo).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
DEFAULT_OUT = ROOT / "nri_plrm" / "proto"

_KEYWORD_DECL_RE = re.compile(r"^\s*(?:None|True|False)\s*:")
_INIT_TEXT = '"""Generated protobuf modules (do not edit; run scripts/gen_protos.py)."""\n'


def proto_files(root: Path = PROTO_ROOT) -> list[Path]:
    """Every ``.proto`` below ``root``, sorted; fails on two files with the same base name."""
    files = sorted(root.rglob("*.proto"))
    seen: dict[str, Path] = {}
    for f in files:
        if f.stem in seen:
            raise SystemExit(
                f"gen_protos: {f} and {seen[f.stem]} share the base name {f.stem!r}; "
                "output is flat under nri_plrm/proto, so proto base names must be unique"
            )
        seen[f.stem] = f
    return files


def _fix_pyi_keywords(path: Path) -> None:
    """Drop stub lines that declare a Python keyword as a name (e.g. enum value ``Field.None``).

    The value stays reachable at run time through ``Enum.Value("None")``; the stub line would be a
    syntax error for type checkers.
    """
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [ln for ln in lines if _KEYWORD_DECL_RE.match(ln) is None]
    path.write_text("".join(kept), encoding="utf-8")


def generate(out: Path, root: Path = PROTO_ROOT) -> list[Path]:
    """Compile every proto under ``root`` into ``out``; returns the files written."""
    from grpc_tools import protoc  # type: ignore[import-untyped]  # test-time dependency

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for proto in proto_files(root):
        args = [
            "grpc_tools.protoc",
            f"-I{proto.parent}",
            f"--python_out={out}",
            f"--pyi_out={out}",
        ]
        args.append(str(proto))
        rc = protoc.main(args)
        if rc != 0:
            raise SystemExit(f"gen_protos: protoc failed with exit code {rc} on {proto}")
        _fix_pyi_keywords(out / f"{proto.stem}_pb2.pyi")
        written += [out / f"{proto.stem}_pb2.py", out / f"{proto.stem}_pb2.pyi"]
    init = out / "__init__.py"
    init.write_text(_INIT_TEXT, encoding="utf-8")
    written.append(init)
    return written


def generate_to_temp() -> dict[str, bytes]:
    """Generate into a temporary directory and return ``{file name: bytes}`` (for staleness)."""
    with tempfile.TemporaryDirectory() as tmp:
        return {p.name: p.read_bytes() for p in generate(Path(tmp))}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    ns = parser.parse_args(argv)
    for path in generate(ns.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
