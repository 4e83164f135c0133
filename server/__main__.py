"""The class server's command for its operator: `python -m server instructor-link CLASS [--base URL]`.

Prints a new one-time instructor link for a class (its code, or its exact name) on this server's
data folder (`$SENSVIZ_DATA_DIR`), for an instructor who lost every browser that held the rights; the
link before it, if unused, is dead from then on. Run it on the server's machine: whoever can run it
can read the data folder anyway.
"""

from __future__ import annotations

import argparse
import sys
from urllib.parse import urlencode

from sensviz.files import data_dir
from server.classes import ClassRefused, ClassStore
from server.owners import owner_secret


def instructor_link(args: argparse.Namespace) -> int:
    store = ClassStore(data_dir() / "classes", owner_secret())
    found = store.find(args.cls)
    if found is None:
        print(f"no class with the code or name {args.cls!r} in {data_dir() / 'classes'}", file=sys.stderr)
        return 2
    try:
        private = store.instructor_code(found.code, None)
    except ClassRefused as err:
        print(f"no link made: {err}", file=sys.stderr)
        return 2
    print(f"{args.base.rstrip('/')}/class?{urlencode({'class': found.code, 'instructor': private})}")
    print(f"A one-time instructor link for {found.name}: the first browser that opens it becomes an instructor; "
          "keep it private.", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    link = commands.add_parser("instructor-link", help="print a new one-time instructor link for a class")
    link.add_argument("cls", metavar="CLASS", help="the class's code (from its class link) or its exact name")
    link.add_argument("--base", default="http://localhost:8501", help="the server's address as students open it")
    link.set_defaults(run=instructor_link)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
