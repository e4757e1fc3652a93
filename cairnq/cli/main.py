"""``cairnq <command>``: argument parsing and dispatch."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from cairnq.cli import demo

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cairnq", description="CairnQ durable task queue")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")
    demo.add_parser(commands)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
