"""Mutation check: does the suite catch plausible bugs in the guarantees specfx makes?

Usage (from the checkout root)::

    python -m tools.testing.mutation                # every mutant: one line each, then `killed K of N`
    python -m tools.testing.mutation --list         # the mutants and the tests meant to catch them
    python -m tools.testing.mutation --only guard-type-blind state-requires-grad
    python -m tools.testing.mutation --fast         # the fast subsets only (no whole-suite fallback)

Each mutant (``tools/testing/mutants.py``) is one text patch of one file of ``specfx/``:
a guard kind not emitted, a guard comparison weakened, a state not restored, an
export lowering emptied, a policy check granting too much... It is applied, alone,
to a private copy of the checkout (made once per worker in a temporary directory;
the checkout itself is never written, so an interrupted run cannot leave it
changed), then the tests named for it run (``pytest -x``); if they all pass, the
whole suite runs. The mutant is *killed* when a test fails, and the line names the
first failing test. Before any mutant, every patch is checked to apply to the
checkout exactly once (a patch that no longer applies is an error, exit 2) and the
fast subsets run once unmutated (they must pass, or a "kill" would mean nothing).

Exit status: 0 when every mutant is killed, 1 when one survives, 2 on an error.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from tools.testing.mutants import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 900  # seconds for one pytest run; a mutant that hangs the suite counts as caught
_IGNORED = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", ".hypothesis", ".pytest_cache")


@dataclasses.dataclass
class Outcome:
    """What became of one mutant: killed or not, by which test, at which stage (its own tests,
    ``subset``, or the whole ``suite``), in how many seconds."""

    mutant: Mutant
    killed: bool
    by: str
    stage: str
    seconds: float


# -- running pytest in a copy --------------------------------------------------------------------

_RUNNING: Dict[int, subprocess.Popen] = {}  # pid -> the pytest runs in progress (ended on interrupt)
_LOCK = threading.Lock()
_STOPPING = threading.Event()  # set on interrupt: no new pytest run starts


def _pytest(copy: Path, tests: Sequence[str]) -> Tuple[int, str]:
    """(exit status, output) of ``pytest -x`` on ``tests`` (all: the whole suite) in ``copy``."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider",
               "--hypothesis-seed=0", "-W", "ignore::pytest.PytestUnknownMarkWarning", *tests]
    process = subprocess.Popen(command, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    with _LOCK:
        _RUNNING[process.pid] = process
        if _STOPPING.is_set():
            _end(process)
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
        return process.returncode, output
    except subprocess.TimeoutExpired:
        _end(process)
        return -1, f"timed out after {TIMEOUT} s"
    finally:
        with _LOCK:
            _RUNNING.pop(process.pid, None)


def _end(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)  # its own session: pytest and anything it started
    except ProcessLookupError:
        pass
    process.wait()


_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def _first_failure(status: int, output: str) -> str:
    if status == -1:
        return "(timeout)"
    found = _FAILED.search(output)
    return found.group(1) if found else f"(pytest exit status {status})"


def _verdict(copy: Path, mutant: Mutant, whole_suite: bool) -> Tuple[bool, str, str]:
    """(killed, by which test, at which stage) for the mutant applied in ``copy``."""
    status, output = _pytest(copy, mutant.tests)
    if status == 5:
        raise RuntimeError(f"mutant {mutant.name}: pytest collected none of {mutant.tests}")
    if status != 0:
        return True, _first_failure(status, output), "subset"
    if not whole_suite:
        return False, "", "subset"
    status, output = _pytest(copy, ())
    return status != 0, _first_failure(status, output) if status else "", "suite"


def run_mutant(copy: Path, mutant: Mutant, whole_suite: bool) -> Outcome:
    """Apply ``mutant`` in ``copy``, run its tests, put the file back."""
    target = copy / mutant.path
    original = target.read_text()
    began = time.perf_counter()
    target.write_text(mutant.apply_to(original))
    try:
        killed, by, stage = _verdict(copy, mutant, whole_suite)
    finally:
        target.write_text(original)
    return Outcome(mutant, killed, by, stage, time.perf_counter() - began)


@dataclasses.dataclass
class Copies:
    """Private copies of the checkout, one per worker, removed on exit."""

    count: int
    base: Path = dataclasses.field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="specfx-mutation-")))
    free: "queue.Queue[Path]" = dataclasses.field(default_factory=queue.Queue)

    def __enter__(self) -> "Copies":
        for index in range(self.count):
            copy = self.base / f"checkout{index}"
            shutil.copytree(ROOT, copy, ignore=_IGNORED, symlinks=True)
            self.free.put(copy)
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    def borrow(self) -> "_Borrowed":
        return _Borrowed(self.free)


class _Borrowed:
    def __init__(self, free: "queue.Queue[Path]") -> None:
        self.free = free

    def __enter__(self) -> Path:
        self.path = self.free.get()
        return self.path

    def __exit__(self, *exc: object) -> None:
        self.free.put(self.path)


# -- the command ------------------------------------------------------------------------------


def check_patches(mutants: Sequence[Mutant]) -> List[str]:
    """Why each patch that does not apply to the checkout does not (empty: all apply)."""
    problems = []
    for mutant in mutants:
        path = ROOT / mutant.path
        if not path.is_file():
            problems.append(f"mutant {mutant.name}: {mutant.path} does not exist")
            continue
        try:
            mutant.apply_to(path.read_text())
        except ValueError as error:
            problems.append(str(error))
        problems += [f"mutant {mutant.name}: no test file {test.split('::')[0]}" for test in mutant.tests
                     if not (ROOT / test.split("::")[0]).is_file()]
    names = [m.name for m in mutants]
    problems += [f"mutant name {n!r} used twice" for n in sorted({n for n in names if names.count(n) > 1})]
    return problems


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _outcomes(mutants: Sequence[Mutant], copies: Copies, jobs: int, whole_suite: bool) -> Iterator[Outcome]:
    def one(mutant: Mutant) -> Outcome:
        with copies.borrow() as copy:
            return run_mutant(copy, mutant, whole_suite)

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(one, mutant) for mutant in mutants]
        try:
            for future in concurrent.futures.as_completed(futures):
                yield future.result()
        finally:
            _STOPPING.set()
            for future in futures:
                future.cancel()
            with _LOCK:
                running = list(_RUNNING.values())
            for process in running:
                _end(process)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutants")
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests")
    parser.add_argument("--fast", action="store_true",
                        help="run each mutant's own tests only (no whole-suite run for a survivor)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="mutants tested at once, each in its own copy (default 2)")
    args = parser.parse_args(argv)
    mutants = list(MUTANTS)
    if args.only:
        unknown = sorted(set(args.only) - {m.name for m in mutants})
        if unknown:
            print(f"unknown mutant(s): {', '.join(unknown)}", file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m.name in args.only]
    if args.list:
        for mutant in mutants:
            print(f"{mutant.name:32} {mutant.path}: {mutant.breaks}\n{'':32} caught by {', '.join(mutant.tests)}")
        return 0
    problems = check_patches(mutants)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    previous = {sig: signal.signal(sig, _interrupted) for sig in (signal.SIGINT, signal.SIGTERM)}
    began = time.perf_counter()
    try:
        with Copies(max(1, min(args.jobs, len(mutants)))) as copies:
            with copies.borrow() as copy:  # the tests must pass before any mutant
                tests = sorted({t for m in mutants for t in m.tests})
                status, output = _pytest(copy, tests)
                if status != 0:
                    print(f"the mutants' tests fail on the unmutated checkout:\n{output[-3000:]}", file=sys.stderr)
                    return 2
            outcomes = []
            running = _outcomes(mutants, copies, copies.count, not args.fast)
            try:
                for outcome in running:
                    outcomes.append(outcome)
                    verdict = "killed  " if outcome.killed else "SURVIVED"
                    by = f"by {outcome.by}" if outcome.killed else "by no test"
                    print(f"{verdict} {outcome.mutant.name:32} {by} ({outcome.stage}, {outcome.seconds:.0f} s)",
                          flush=True)
            finally:
                running.close()  # (on an interrupt: ends the pytest runs before their copies are removed)
    except KeyboardInterrupt:
        print("interrupted: the checkout was never changed; the copies are removed", file=sys.stderr)
        return 2
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    killed = sum(o.killed for o in outcomes)
    print(f"killed {killed} of {len(outcomes)} ({time.perf_counter() - began:.0f} s)")
    return 0 if killed == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
