"""The README and docs/ stay true: every relative link resolves, every `sensviz` command in a shell
block parses with the command line's own parser, and every other command of ours (`python
benchmarks/...`, `python -m server ...`) names a script that answers `--help` with every option the
doc gives it; and every path of ours that a doc, module, test or config names is in the repository."""

import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sensviz.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
EXTERNAL = {"pip", "streamlit", "ray", "git", "mkdir", "cp", "echo", "cd", "apt-get", "export", "kill", "curl",
            "haproxy", "openssl", "bash", "sh", "sudo", "systemctl", "ls", "rm", "tar", "rsync", "du", "df"}
"""Commands of other programs: the docs show them, their own manuals document them."""
PREFIXES = re.compile(r"^(?:(?:nohup|nice(?: -n -?\d+)?|env|[A-Z_]+=\S+)\s+)+")


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"^```(?:bash|sh|shell)\n(.*?)^```", text, flags=re.M | re.S)


def commands(path: Path) -> list[tuple[str, list[str]]]:
    """Every command line of the file's shell blocks, continuation lines joined, comments and the
    environment prefix (`nice`, `env`, `VAR=value`) left out: (the line as written, its words)."""
    found = []
    for block in shell_blocks(path.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            for part in re.split(r"\s*(?:&&|;|\|)\s*", line):
                part = PREFIXES.sub("", part.rstrip("&").strip())
                if part:
                    found.append((part, shlex.split(part.replace("$", "X"))))
    return found


def ours(words: list[str]) -> tuple[str, list[str]] | None:
    """('sensviz', args) for our CLI; (a script path or a module, args) for another program of ours."""
    if words[0] == "sensviz":
        return "sensviz", words[1:]
    if words[0] in {"python", "python3"} and len(words) > 1:
        if words[1] == "-m" and words[2] == "sensviz":
            return "sensviz", words[3:]
        if words[1] == "-m" and words[2] != "pytest":
            return "-m " + words[2], words[3:]
        if words[1].endswith(".py"):
            return words[1], words[2:]
    return None


DOC_COMMANDS = [(path.relative_to(ROOT).as_posix(), line, words) for path in DOCS for line, words in commands(path)]


def test_the_docs_hold_commands_to_check():
    assert sum(1 for *_, words in DOC_COMMANDS if ours(words) and ours(words)[0] == "sensviz") >= 20


@pytest.mark.parametrize("path", [p.relative_to(ROOT).as_posix() for p in DOCS])
def test_every_relative_link_resolves(path):
    text = (ROOT / path).read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    for link in links:
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue
        target = ((ROOT / path).parent / link.split("#", 1)[0]).resolve()
        assert target.exists(), f"{path}: the link {link} points to nothing"


@pytest.mark.parametrize(("path", "line", "words"), [c for c in DOC_COMMANDS if c[2][0] not in EXTERNAL
                                                     and (ours(c[2]) or (None, []))[0] == "sensviz"])
def test_every_sensviz_command_parses(path, line, words):
    args = ours(words)[1]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(args)
    except SystemExit as stop:
        assert stop.code == 0, f"{path}: `{line}` does not parse (exit {stop.code})"  # 0: it asked for --help


HELP_ALL = """
import contextlib, io, json, runpy, sys
out = {}
for target, head in json.loads(sys.argv[1]):
    buffer = io.StringIO()
    sys.argv = [target] + head + ["--help"]
    code = None
    with contextlib.redirect_stdout(buffer):
        try:
            if target.startswith("-m "):
                runpy.run_module(target[3:], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
        except SystemExit as stop:
            code = stop.code
    out[target + " " + " ".join(head)] = [code, buffer.getvalue()]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_every_other_command_of_ours_answers_help_with_the_options_the_docs_give():
    """The scripts' `--help` in one interpreter (torch imported once): each exits 0 and lists every
    option a doc passes it."""
    wanted = {}
    for path, line, words in DOC_COMMANDS:
        found = ours(words)
        if found is None or found[0] == "sensviz" or words[0] in EXTERNAL:
            continue
        target, args = found
        if not target.startswith("-m "):
            assert (ROOT / target).is_file(), f"{path}: `{line}` names a script that is not there"
        head = [a for a in args[:1] if not a.startswith("-")] if target.startswith("-m ") else []
        wanted.setdefault((target, tuple(head)), []).append((path, line, [a.split("=")[0] for a in args
                                                                          if a.startswith("--")]))
    assert wanted, "no script commands found in the docs"
    done = subprocess.run([sys.executable, "-c", HELP_ALL, json.dumps([[t, list(h)] for t, h in wanted])],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    helps = json.loads(done.stdout.splitlines()[-1])
    for (target, head), uses in wanted.items():
        code, text = helps[target + " " + " ".join(head)]
        assert code == 0, f"`{target} {' '.join(head)} --help` exited {code}"
        for path, line, options in uses:
            missing = [o for o in options if o not in text]
            assert not missing, f"{path}: `{line}` passes {missing}, which `--help` does not list"


FOLDERS = ("tests", "docs", "benchmarks", "sensviz", "server", "ui", "pages", "deploy", "experiments", "checkpoints",
           ".ci", ".streamlit")
REFERENCE = re.compile(rf"(?<![\w./-])((?:{'|'.join(re.escape(f) for f in FOLDERS)})/[\w./-]*\w)(?![\w<{{*-])")
"""A path of ours in running text: a top folder of the repository, then the path (a pattern, `<...>`, `{...}` or `*`,
is not a path)."""
OUTPUTS = ("experiments/running/",)
"""Folders that commands create (a sweep still running writes there): named as where things go, not as files."""
WRITTEN_BY_A_TEST = {"experiments/toy.toml"}
"""Written in a test's own folder, and named there as the page it checks names it."""


def test_every_path_a_doc_comment_or_docstring_names_is_in_the_repository():
    """Every path under one of our folders that a README, doc, module, test, spec or config names exists (a test moved
    into tests/<layer>/ left 26 stale names behind)."""
    files = [p for folder in FOLDERS for p in (ROOT / folder).rglob("*") if p.is_file()
             and p.suffix in (".py", ".md", ".toml", ".cfg", "") and "results" not in p.parts]
    missing = {}
    for path in [ROOT / "README.md", ROOT / "app.py", *files]:
        for found in REFERENCE.findall(path.read_text(errors="replace")):
            if not (ROOT / found.rstrip(".")).exists() and not found.startswith(OUTPUTS) and found not in WRITTEN_BY_A_TEST:
                missing.setdefault(found, []).append(str(path.relative_to(ROOT)))
    assert not missing, missing
