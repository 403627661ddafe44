"""attnres-check's cases as pytest items.

    pytest -p attnres_check.pytest_plugin --attnres-cases cases/ \\
        --attnres-kernel python:mypkg.ops:attn_res [--attnres-arg prefix=prefix_sum ...]

(installed with the package, pytest loads it without -p). One item per case, named by its file and
its name (cases/guard.json::seed-repro-prefix-stride-7175), so -k, --lf, -x and --junitxml work as
usual. Without --attnres-cases the plugin adds nothing.

The cases are judged by the attnres-check binary (--attnres-binary, else $ATTNRES_CHECK, else
attnres-check on PATH), not here: all selected cases run in one `attnres-check run` (under
pytest-xdist, one per case file and worker), an external kernel in the tool's worker processes. A case that does not meet its expectation
fails with the tool's explanation (max-abs error and where, mismatched elements, canaries, the
kernel's traceback) and, with --attnres-repro-dir, the path of its repro bundle. A case the kernel's
signature cannot express, or (with --attnres-allow-not-run) one nothing here can run, is skipped
with the reason. Under pytest-xdist, `--dist loadfile` keeps each case file's cases in one worker.
"""
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import tempfile

import pytest

# attnres-check run's exit status for bad input (a usage error, a case file it cannot read).
EXIT_BAD_INPUT = 2


def pytest_addoption(parser):
    group = parser.getgroup("attnres-check", "AttnRes kernels judged by attnres-check")
    group.addoption("--attnres-cases", action="append", default=[], metavar="PATH",
                    help="case files or directories (read recursively): one test per case (repeatable)")
    group.addoption("--attnres-kernel", metavar="SPEC",
                    help="the kernel every case runs on: python:MODULE:FUNCTION, torch-op:NS::OP, so:PATH, native "
                         "or portable (attnres-check run --kernel); default: each case's own")
    group.addoption("--attnres-arg", action="append", default=[], metavar="CONTRACT=PARAMETER",
                    help="binds a python: kernel's PARAMETER to the contract's CONTRACT (repeatable; run --arg)")
    group.addoption("--attnres-signature", metavar="auto|vllm|flashinfer",
                    help="how a python: kernel is called (run --signature; default auto)")
    group.addoption("--attnres-profile", metavar="PRESET|FILE",
                    help="what the kernel declares it refuses (run --profile): vllm-op, vllm-dispatch, flashinfer "
                         "or a profile file")
    group.addoption("--attnres-torch-library", metavar="PATH", help="the library registering a torch-op: kernel")
    group.addoption("--attnres-backend", default="auto", choices=("auto", "cuda", "cpu"),
                    help="run --backend (default auto: the CUDA device if there is one)")
    group.addoption("--attnres-timeout", metavar="SECONDS", help="run --timeout: seconds a case may take")
    group.addoption("--attnres-allow-not-run", action="store_true",
                    help="skip, rather than fail, cases nothing here can run (run --allow-not-run)")
    group.addoption("--attnres-repro-dir", metavar="DIR",
                    help="write a repro bundle of each failing case under this new or empty directory")
    group.addoption("--attnres-binary", metavar="PATH", help="the attnres-check binary")


# As `attnres-check run` reads directories: one holding this file only where it is named itself.
OPT_IN_MARKER = "OPT-IN"


def _case_files(paths):
    """The case files under `paths`, each once, in order (directories read recursively, except
    those below them that hold an OPT-IN file, as attnres-check reads them)."""
    files = []
    for path in map(pathlib.Path, paths):
        found = sorted(p for p in path.rglob("*.json") if p.is_file() and not _opted_out(p, path)) \
            if path.is_dir() else [path]
        files.extend(f for f in found if f not in files)
    return files


def _opted_out(file, named):
    """Whether a directory between `named` (excluded) and `file` holds the OPT-IN marker."""
    return any((d / OPT_IN_MARKER).is_file() for d in file.parents if d != named and named in d.parents)


def _case_names(path):
    """The names of the cases a case file holds (the tool itself reads the file when it runs)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise pytest.UsageError(f"--attnres-cases: {path}: {error}") from None
    cases = data if isinstance(data, list) else [data]
    names = [c.get("name") if isinstance(c, dict) else None for c in cases]
    if not all(isinstance(n, str) and n for n in names):
        raise pytest.UsageError(f"--attnres-cases: {path}: a case without a name")
    return names


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Adds the cases before -k, -m and --lf select among the items."""
    for path in _case_files(config.getoption("attnres_cases")):
        if not path.exists():
            raise pytest.UsageError(f"--attnres-cases: {path} does not exist")
        items.extend(CaseFile.from_parent(session, path=path.resolve()).collect())


class CaseNotMet(Exception):
    """A case that did not meet its expectation; its text is the tool's explanation."""


def _binary(config):
    binary = config.getoption("attnres_binary") or os.environ.get("ATTNRES_CHECK") or shutil.which("attnres-check")
    if not binary:
        raise pytest.UsageError("attnres-check not found: give --attnres-binary PATH or set ATTNRES_CHECK")
    return binary


def _exact_glob(name):
    """A --filter that matches exactly `name`: a glob (it has a [...]) with each character literal."""
    return "".join(f"[{c}]" if c in "*?[]" or i == 0 else c for i, c in enumerate(name))


def _run_flags(config):
    """The run flags the plugin's options give, as the tool takes them."""
    flags = ["--backend", config.getoption("attnres_backend")]
    for option, flag in (("attnres_kernel", "--kernel"), ("attnres_signature", "--signature"),
                         ("attnres_profile", "--profile"), ("attnres_torch_library", "--torch-library"),
                         ("attnres_timeout", "--timeout")):
        if config.getoption(option):
            flags += [flag, config.getoption(option)]
    for argument in config.getoption("attnres_arg"):
        flags += ["--arg", argument]
    if config.getoption("attnres_allow_not_run"):
        flags.append("--allow-not-run")
    return flags


class ToolRun:
    """One `attnres-check run` over the selected cases of some case files, made when the first of
    them runs: all of the session's (under pytest-xdist, one case file's per run, since a worker
    does not know which items it will be sent)."""

    def __init__(self, config, files, selected, repro_dir):
        self.command = [_binary(config), "run"] + [str(f) for f in files] + _run_flags(config)
        for name in selected:
            self.command += ["--filter", _exact_glob(name)]
        if repro_dir:
            self.command += ["--repro-dir", str(repro_dir)]
        with tempfile.TemporaryDirectory(prefix="attnres-pytest-") as work:
            report = pathlib.Path(work) / "report.json"
            ran = subprocess.run(self.command + ["--json", str(report)], capture_output=True, text=True)
            if ran.returncode == EXIT_BAD_INPUT:
                pytest.exit(f"{shlex.join(self.command)}\n{ran.stderr.strip()}", returncode=pytest.ExitCode.USAGE_ERROR)
            cases = json.loads(report.read_text())["cases"] if report.exists() else []
        bundles = {}
        if repro_dir and (repro_dir / "index.json").exists():
            index = json.loads((repro_dir / "index.json").read_text())
            bundles = {b["location"]: repro_dir / b["dir"] for b in index["bundles"]}
            bundles.update({c["location"]: f"no bundle: {c['reason']}" for c in index["left_out"]})
        self.output = (ran.stdout + ran.stderr).strip()
        # (case file, case name) -> the case's result, with the path of its bundle.
        self.results = {(pathlib.Path(c["location"].partition("#")[0]).resolve(), c["name"]):
                        dict(c, bundle=bundles.get(c["location"])) for c in cases}


def _tool_run(item):
    """The ToolRun that judges `item`'s case, made on first use."""
    config, session = item.config, item.session
    runs = config.__dict__.setdefault("_attnres_runs", {})
    worker = getattr(config, "workerinput", {}).get("workerid")
    key = item.parent.path if worker else None
    if key not in runs:
        items = [i for i in session.items if isinstance(i, CaseItem) and (not worker or i.parent is item.parent)]
        files = list(dict.fromkeys(i.parent.path for i in items))
        root = config.getoption("attnres_repro_dir")
        repro_dir = None
        if root and worker:
            name = re.sub(r"[^A-Za-z0-9._-]", "-", os.path.relpath(item.parent.path, config.rootpath))
            repro_dir = pathlib.Path(root) / f"{name}-{worker}"
        elif root:
            repro_dir = pathlib.Path(root)
        runs[key] = ToolRun(config, files, list(dict.fromkeys(i.name for i in items)), repro_dir)
    return runs[key]


class CaseFile(pytest.File):
    """One case file, its cases as items."""

    def collect(self):
        for name in _case_names(self.path):
            yield CaseItem.from_parent(self, name=name)


class CaseItem(pytest.Item):
    """One case of a case file, judged by the tool."""

    def runtest(self):
        run = _tool_run(self)
        result = run.results.get((self.path, self.name))
        if result is None:
            raise CaseNotMet(f"attnres-check ran no case {self.name} from {self.path}:\n"
                             f"{shlex.join(run.command)}\n{run.output}")
        if result["meets_expectation"]:
            if result["disposition"] in ("skipped", "not-run"):
                pytest.skip(f"{result['disposition']}: {result['detail']}")
            return
        raise CaseNotMet(self._explanation(result))

    def _explanation(self, result):
        lines = [f"{self.name} ({result['location']}, seed {result['seed']}): {result['disposition']}",
                 f"expected: {result['expectation']}", f"kernel: {result['kernel']}"]
        lines += [part for part in result["detail"].split("; ") if part]
        if result.get("kernel_context"):
            lines += ["kernel context:", result["kernel_context"].rstrip()]
        bundle = result.get("bundle")
        if bundle:
            lines.append(f"repro bundle: {bundle}")
        lines.append("replay: " + shlex.join([_binary(self.config), "run", str(self.path), "--filter",
                                              _exact_glob(self.name)] + _run_flags(self.config)))
        return "\n".join(lines)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CaseNotMet):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}::{self.name}"
