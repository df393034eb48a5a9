"""A small mutation-testing harness: does the test suite notice when the code is wrong?

For each module (every one under src/bagel_data but the CLI and the
synthetic data) it applies one small change at a time (a comparison flipped, an
arithmetic or boolean operator swapped, a constant moved by one, a `not` removed, a
`break`/`continue` removed) to a private copy of `src/`, runs the tests that cover that
module, and counts the mutant as *killed* when they fail (or time out). Survivors are
printed with their line, so each one can be read and either killed by a new test or
explained as equivalent (docs/testing.md keeps the last run's list).

Beside those generated mutants, each module may have hand-written ones
(`scripts/written_mutants.py`): bugs that look like real ones (a limit off by one, a
condition dropped, two arguments swapped, a state field not restored), which the generated
operators do not make. They run with the generated ones and are scored apart;
`--written` runs them alone. A written mutant whose code is gone is an error naming it, so
the list is kept in step with the code.

    python scripts/mutate.py                       # every module but cli/, synthetic/ (slow: many hours on 2 cores)
    python scripts/mutate.py --list                # which modules, with the tests run for each
    python scripts/mutate.py packing/pack.py       # one module
    python scripts/mutate.py --sample 40 --jobs 2  # a seeded sample of 40 mutants per module

Speed: one coverage run of the module's tests (with pytest-cov's per-test contexts) records
which tests execute each line; modules with the same test set share that run. A mutant first runs only the tests that execute its lines
(`-x`: the first failure kills it); only a mutant that survives those, or whose lines no
test executes in the test process (import-time code, code that runs only in a DataLoader
worker), runs the module's whole test set. So the verdict is the same as running the whole
set for every mutant, at a fraction of the time.

It is deliberately not part of CI; run it before a release and whenever a core module
changes. Results go to --out (JSON) as well as the terminal.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import copy
import dataclasses
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "bagel_data"

# Core module -> the tests that are meant to catch a fault in it.
CORE: dict[str, list[str]] = {
    "packing/pack.py": ["tests/packing", "tests/media/test_convert.py", "tests/conformance/test_golden_packed.py"],
    "packing/packed_dataset.py": [
        "tests/packing",
        "tests/checkpoint",
        "tests/dropin",
        "tests/conformance/test_golden_packed.py",
    ],
    "packing/placer.py": [
        "tests/packing",
        "tests/checkpoint",
        "tests/dropin",
        "tests/conformance/test_golden_packed.py",
    ],
    "packing/overflow.py": ["tests/packing", "tests/checkpoint", "tests/dropin"],
    "packing/groups.py": ["tests/packing", "tests/checkpoint", "tests/conformance/test_golden_packed.py"],
    "checkpoint/stream.py": ["tests/checkpoint", "tests/dropin", "tests/packing"],  # incl. compat resume
    "packing/strategies.py": ["tests/packing"],
    "packing/layout.py": ["tests/packing", "tests/conformance/test_golden_packed.py"],
    "sharding.py": ["tests/test_sharding.py", "tests/checkpoint", "tests/families", "tests/conformance"],
    "families/base.py": [
        "tests/test_sharding.py",
        "tests/checkpoint",
        "tests/families",
        "tests/conformance",
        "tests/test_no_hang.py",
    ],
    "families/unit_plan.py": ["tests/test_sharding.py", "tests/checkpoint", "tests/families", "tests/conformance"],
    "families/unit_kinds.py": ["tests/families", "tests/checkpoint", "tests/conformance"],
    "checkpoint/state.py": ["tests/checkpoint", "tests/packing/test_pack.py", "tests/packing/test_strategies.py"],
    "checkpoint/restart.py": ["tests/checkpoint"],
    "checkpoint/merge.py": ["tests/checkpoint"],
    "sources/parquet.py": ["tests/sources", "tests/families", "tests/test_sharding.py"],
    "sources/jsonl.py": ["tests/sources", "tests/families/test_vlm.py"],
    "families/t2i.py": [
        "tests/families",
        "tests/conformance/test_golden_stream.py",
        "tests/test_bad_data.py",
        "tests/tools/test_validate_guarantee.py",  # worst_case_rows: what validate walks
        "tests/dropin/test_api.py",
    ],
    "families/edit.py": [
        "tests/families",
        "tests/conformance/test_golden_stream.py",
        "tests/test_bad_data.py",
        "tests/dropin/test_api.py",
    ],
    "families/parquet_info.py": ["tests/families/test_edit.py", "tests/sources/test_startup_requests.py"],
    "families/vlm.py": [
        "tests/families",
        "tests/conformance/test_golden_stream.py",
        "tests/test_bad_data.py",
        "tests/dropin/test_api.py",
    ],
    "families/conversation.py": ["tests/families", "tests/conformance/test_golden_stream.py"],
}

# Every other module under src/bagel_data except the CLI and the synthetic
# data (added 2026-12-01; not yet scored, see docs/testing.md) -> the tests meant to catch a
# fault in it. A module listed in neither table runs the whole suite.
EXCLUDED = ("cli/", "synthetic/")  # the benchmark is not under src/bagel_data (benchmarks/)
# Modules whose tests need an optional extra: run only where it is installed (`make test-ray`'s).
NEEDS = {"tools/prepare/ray_engine.py": ("ray",)}
_GOLDEN = ["tests/conformance/test_golden_stream.py", "tests/conformance/test_golden_packed.py"]
# The batch buffers and shared-memory segments: their own tests, the loader's, and the pack
# writers that fill them (tests/checkpoint ran here before: it exercises neither module's choices).
_SHARED_MEMORY = [
    "tests/packing/test_buffers.py",
    "tests/packing/test_segments.py",
    "tests/test_loader_segments.py",
    "tests/media/test_convert.py",
    "tests/packing/test_pack.py",
]
MORE: dict[str, list[str]] = {
    "__init__.py": ["tests/dropin/test_api.py", "tests/test_compat.py"],
    "assembly.py": ["tests/families", "tests/config", "tests/dropin", "tests/test_config.py", *_GOLDEN],
    "batch.py": [
        "tests/test_batch.py",
        "tests/media/test_pixels.py",
        "tests/packing",
        "tests/dropin",
        "tests/test_loader_segments.py",
    ],
    "compat/__init__.py": [
        "tests/test_compat.py",
        "tests/conformance",
        "tests/checkpoint/test_compat_resume.py",
        "tests/dropin/test_entrances.py",
    ],
    "compat/streams.py": [
        "tests/test_compat.py",
        "tests/media/test_video.py",
        "tests/conformance",
        "tests/checkpoint/test_compat_resume.py",
    ],
    "config.py": [  # incl. the interleaved and user families, built from their group keys
        "tests/config",
        "tests/test_config.py",
        "tests/docs/test_example_configs.py",
        "tests/families/test_interleaved.py",
        "tests/families/test_user_family.py",
    ],
    "schema/files.py": ["tests/config", "tests/test_config.py", "tests/cli"],
    "datasets.py": ["tests/dropin", "tests/test_config.py", *_GOLDEN],
    "distributed.py": ["tests/test_distributed_topology.py", "tests/checkpoint", "tests/test_sharding.py"],
    "errors.py": ["tests/test_errors.py", "tests/test_bad_data.py", "tests/test_bad_rows.py"],
    "formats.py": ["tests/tools/test_prepare.py", "tests/families"],
    "metrics.py": ["tests/test_metrics.py", "tests/test_metrics_resume.py"],
    "loader.py": [
        "tests/checkpoint",
        "tests/dropin",
        "tests/test_loader.py",
        "tests/test_loader_stats.py",
        "tests/test_loader_segments.py",
    ],
    "sample.py": ["tests/families", "tests/packing"],
    "tokenizer.py": ["tests/test_tokenizer.py", "tests/conformance/test_golden_stream.py"],
    "packing/torch_support.py": ["tests/packing/test_torch_support.py"],
    "checkpoint/collect.py": ["tests/checkpoint"],
    "checkpoint/foreign.py": ["tests/checkpoint", "tests/dropin/test_nemo_checkpoint.py"],
    "checkpoint/inputs.py": ["tests/checkpoint"],
    "families/interleaved.py": [
        "tests/families/test_interleaved.py",
        "tests/families/test_interleaved_documents.py",
        "tests/families/test_interleaved_rules.py",
        "tests/tools/test_prepare_interleaved.py",
        "tests/checkpoint/test_resume_inputs.py",
    ],
    "families/interleaved_base.py": [  # the parse_row contract: user families and the interleaved one
        "tests/families/test_user_family.py",
        "tests/families/test_parse_row_results.py",
        "tests/families/test_parse_row_fuzz.py",
        "tests/families/test_interleaved.py",
        "tests/families/test_interleaved_documents.py",
        "tests/dropin/test_api.py",
    ],
    "families/registry.py": ["tests/families", "tests/config", "tests/test_config.py"],
    "families/worst_case.py": ["tests/families", "tests/tools/test_validate_guarantee.py"],
    # The walk by rows: its arithmetic and its walk are tested outside tests/families.
    "families/row_share.py": ["tests/test_row_share.py", "tests/test_row_walk.py", "tests/families"],
    "families/row_plan.py": ["tests/test_row_walk.py", "tests/test_row_share.py", "tests/families"],
    "media/convert.py": [  # the writers, the transforms that make PendingImages, the packer that writes them
        "tests/media/test_convert.py",
        "tests/media/test_images.py",
        "tests/media/test_high_bit_depth.py",
        "tests/packing/test_pack.py",
        "tests/packing/test_buffers.py",
    ],
    "media/fast_decode.py": ["tests/media", "tests/families/test_fast_decode_families.py"],
    "media/images.py": ["tests/media", "tests/families", "tests/test_fuzz.py", "tests/test_bad_data.py"],
    "media/video.py": ["tests/media", "tests/families/test_vlm.py"],
    "packing/buffers.py": _SHARED_MEMORY,
    "packing/config.py": ["tests/packing", "tests/config"],
    "packing/parts.py": ["tests/packing", "tests/dropin/test_entrances.py"],
    "packing/invariants.py": ["tests/packing", *_GOLDEN],
    "packing/segments.py": _SHARED_MEMORY,
    "sources/storage.py": ["tests/sources"],
    # The node cache and the content digest it and checkpoints key on (issue 41).
    "sources/jsonl_cache.py": [
        "tests/sources/test_jsonl_cache.py",
        "tests/sources/test_jsonl_cache_trust.py",
        "tests/sources/test_jsonl_index.py",
    ],
    "sources/content_stamp.py": [  # its own tests: the digest recomputed from its rule, at each limit
        "tests/sources/test_content_stamp.py",
        "tests/sources/test_jsonl_cache_trust.py",
        "tests/sources/test_jsonl_cache.py",
        "tests/checkpoint/test_resume_inputs.py",
    ],
    "families/sample_checks.py": [
        "tests/families/test_sample_checks.py",
        "tests/families/test_parse_row_results.py",
        "tests/families/test_parse_row_fuzz.py",
        "tests/families/test_user_family.py",
    ],
    "packing/dropout.py": [
        "tests/packing/test_dropout.py",
        "tests/packing/test_strategies.py",
        "tests/dropin/test_entrances.py",
    ],
    "tools/drops.py": ["tests/tools/test_drops.py", "tests/tools/test_prepare_messages.py", "tests/cli"],
    # Needs the `ray` extra (else its tests skip and every mutant survives): `make test-ray`'s setup.
    "tools/prepare/ray_engine.py": ["tests/tools/test_prepare_ray.py", "tests/tools/test_prepare_engine.py"],
    # cfg_warnings is also reached through user families (the worked example of extending.md).
    "tools/validate.py": ["tests/tools", "tests/cli", "tests/families/test_extending_doc.py"],
}
_BY_FOLDER = {
    "nemo/": ["tests/dropin", "tests/conformance/test_golden_packed.py", "tests/test_config.py"],
    "schema/settings.py": ["tests/config", "tests/dropin/test_entrances.py", "tests/dropin/test_api.py"],
    # Weight schedules are parsed here and tested where the mixer reads them.
    "schema/weights.py": ["tests/packing/test_schedule.py", "tests/config", "tests/test_config.py"],
    "schema/": ["tests/config", "tests/test_config.py", "tests/docs/test_example_configs.py"],
    "sources/": ["tests/sources", "tests/families"],
    "tools/inspect/": ["tests/tools/test_inspect.py"],
    "tools/prepare/": ["tests/tools", "tests/dropin/test_prepare_edit_keys.py"],
    "tools/": ["tests/tools", "tests/cli"],
    "checkpoint/": ["tests/checkpoint"],
    "families/": ["tests/families"],
    "media/": ["tests/media"],
    "packing/": ["tests/packing"],
}


def all_modules() -> list[str]:
    """Every module `make mutate` scores: all of src/bagel_data but `EXCLUDED`."""
    found = (path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py"))
    return sorted(module for module in found if not module.startswith(EXCLUDED))


def tests_for(module: str) -> list[str]:
    if module in CORE or module in MORE:
        return CORE.get(module) or MORE[module]
    folder = next((prefix for prefix in _BY_FOLDER if module.startswith(prefix)), None)
    return _BY_FOLDER[folder] if folder else ["tests"]


_SWAPS: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.And: ast.Or,
    ast.Or: ast.And,
}


@dataclasses.dataclass(frozen=True)
class Mutant:
    module: str
    index: int  # the index-th mutable site of the module, in `ast.walk` order (written: in its list)
    line: int
    end_line: int
    before: str
    after: str
    kind: str = "generated"  # or "written" (scripts/written_mutants.py)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of docstring constants and of anything inside an annotation or an f-string:
    changing them changes no behaviour a test should see."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            skip.add(id(first.value))
        for annotation in (getattr(node, "annotation", None), getattr(node, "returns", None)):
            if annotation is not None:
                skip.update(id(n) for n in ast.walk(annotation))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _sites(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """Every place one mutation applies, as (node, kind)."""
    skip = _docstring_nodes(tree)
    sites: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            sites += [(node, f"cmp{i}") for i, op in enumerate(node.ops) if type(op) in _SWAPS]
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _SWAPS:
            sites.append((node, "op"))
        elif isinstance(node, ast.BoolOp):
            sites.append((node, "bool"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            sites.append((node, "not"))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, bool):
            sites.append((node, "const"))
        elif isinstance(node, (ast.Break, ast.Continue)):
            sites.append((node, "jump"))
    return sites


def _apply(node: ast.AST, kind: str) -> ast.AST | None:
    """Mutate `node` in place (or return the node to put in its place)."""
    if kind.startswith("cmp"):
        i = int(kind[3:])
        node.ops[i] = _SWAPS[type(node.ops[i])]()  # type: ignore[attr-defined]
    elif kind in ("op", "bool"):
        node.op = _SWAPS[type(node.op)]()  # type: ignore[attr-defined]
    elif kind == "not":
        return node.operand  # type: ignore[attr-defined]
    elif kind == "const":
        value = node.value  # type: ignore[attr-defined]
        node.value = (not value) if isinstance(value, bool) else value + 1  # type: ignore[attr-defined]
    elif kind == "jump":
        return ast.Pass()
    return node


class _Replace(ast.NodeTransformer):
    def __init__(self, target: ast.AST, replacement: ast.AST):
        self.target, self.replacement = target, replacement

    def generic_visit(self, node: ast.AST) -> ast.AST:
        return self.replacement if node is self.target else super().generic_visit(node)


def _statement_lines(tree: ast.AST) -> dict[int, tuple[int, int]]:
    """id(node) -> the lines of the innermost statement holding it. Coverage records a
    multi-line statement under its first line, so a mutant inside it is looked up there."""
    lines: dict[int, tuple[int, int]] = {}

    def visit(node: ast.AST, statement: tuple[int, int]) -> None:
        if isinstance(node, ast.stmt):
            # A compound statement's body is its own statements; its header spans up to them.
            body = getattr(node, "body", None)
            end = body[0].lineno - 1 if isinstance(body, list) and body and isinstance(body[0], ast.stmt) else None
            statement = (node.lineno, max(node.lineno, end if end is not None else node.end_lineno or node.lineno))
        lines[id(node)] = statement
        for child in ast.iter_child_nodes(node):
            visit(child, statement)

    visit(tree, (0, 0))
    return lines


def mutants_of(module: str) -> list[Mutant]:
    source = (PACKAGE / module).read_text()
    tree = ast.parse(source)
    statements = _statement_lines(tree)
    found = []
    for index, (node, kind) in enumerate(_sites(tree)):
        before = ast.get_source_segment(source, node) or type(node).__name__.lower()
        clone = copy.deepcopy(node)
        after = ast.unparse(_apply(clone, kind) or clone)
        line = getattr(node, "lineno", 0)
        end_line = getattr(node, "end_lineno", None) or line
        first, last = statements.get(id(node), (line, end_line))
        line, end_line = min(line, first), max(end_line, last)
        found.append(Mutant(module, index, line, end_line, before.strip()[:80], after.strip()[:80]))
    return found


def written_mutants_of(module: str) -> list[Mutant]:
    """The module's hand-written mutants; one whose text is not in the module exactly once is
    an error naming it (the code moved on: write it again against today's)."""
    from written_mutants import WRITTEN

    source = (PACKAGE / module).read_text()
    found = []
    for index, (find, replace, why) in enumerate(WRITTEN.get(module, ())):
        if source.count(find) != 1:
            raise SystemExit(f"{module}: written mutant {index} ({why}) matches {source.count(find)} places, not one")
        line = source[: source.index(find)].count("\n") + 1
        found.append(
            Mutant(module, index, line, line + find.count("\n"), find.strip()[:80], replace.strip()[:80], "written")
        )
    return found


def mutant_source(mutant: Mutant) -> str:
    """The module's source with `mutant` applied."""
    if mutant.kind == "written":
        from written_mutants import WRITTEN

        find, replace, _ = WRITTEN[mutant.module][mutant.index]
        return (PACKAGE / mutant.module).read_text().replace(find, replace, 1)
    return mutated_source(mutant.module, mutant.index)


def mutated_source(module: str, index: int) -> str:
    tree = ast.parse((PACKAGE / module).read_text())
    node, kind = _sites(tree)[index]
    replacement = _apply(node, kind)
    if replacement is not node and replacement is not None:
        ast.copy_location(replacement, node)
        tree = _Replace(node, replacement).visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree))


def run_tests(
    tests: list[str], src: Path, timeout: float, extra: tuple[str, ...] = (), env_extra: dict | None = None
) -> tuple[bool, float]:
    """(the tests passed, seconds) with `src` first on the import path."""
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1", **(env_extra or {})}
    start = time.monotonic()
    # Its own temporary folder: parallel pytest runs must not clean up each other's.
    basetemp = tempfile.mkdtemp(prefix="bagel-mutation-pytest-")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "not slow",
        "--basetemp",
        basetemp,
    ]
    command += [*extra, *tests]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  timed out after {timeout:.0f} s (counted as killed): {tests[:3]}...", file=sys.stderr, flush=True)
        return False, time.monotonic() - start
    finally:
        shutil.rmtree(basetemp, ignore_errors=True)
    return done.returncode == 0, time.monotonic() - start


@dataclasses.dataclass(frozen=True)
class Coverage:
    by_line: dict[int, set[str]]  # line of the module -> ids of the tests that execute it
    import_time: frozenset[int]  # lines run while modules are imported (every test depends on them)
    process_tests: tuple[str, ...]  # tests that start a process (DataLoader workers)
    durations: dict[str, float]  # seconds per test, to run the fastest first

    def tests_for(self, mutant: Mutant) -> tuple[list[str], list[str] | None]:
        """(the tests that execute the mutant's lines, the tests to confirm a survivor with:
        None for the module's whole set)."""
        lines = range(mutant.line, mutant.end_line + 1)
        if any(line in self.import_time for line in lines):
            return [], None
        chosen: set[str] = set()
        for line in lines:
            chosen |= self.by_line.get(line, set())
        if not chosen:  # no test runs it in the test process: only the whole set can tell
            return [], None
        return self._fastest_first(chosen), self._fastest_first(set(self.process_tests) - chosen)

    def _fastest_first(self, tests: set[str]) -> list[str]:
        return sorted(tests, key=lambda test: (self.durations.get(test, 0.0), test))


# test set -> (passed, data file, probe, seconds the run took)
_COVERAGE_RUNS: dict[tuple[str, ...], tuple[bool, Path, dict, float]] = {}
_COVERAGE_DIR: tempfile.TemporaryDirectory | None = None


def _coverage_run(tests: list[str], timeout: float) -> tuple[bool, Path, dict, float]:
    """One coverage run (per-test contexts) of `tests`, kept for the process: modules that
    share a test set (schema/*, tools/prepare/*, ...) read their lines from the same run."""
    global _COVERAGE_DIR
    key = tuple(tests)
    if key not in _COVERAGE_RUNS:
        if _COVERAGE_DIR is None:
            _COVERAGE_DIR = tempfile.TemporaryDirectory(prefix="bagel-mutation-cov-")
        tmp = Path(_COVERAGE_DIR.name) / str(len(_COVERAGE_RUNS))
        tmp.mkdir()
        data_file, probe_file = tmp / ".coverage", tmp / "probe.json"
        passed, seconds = run_tests(
            tests,
            ROOT / "src",
            timeout,
            extra=("--cov=bagel_data", "--cov-context=test", "--cov-report=", "-p", "mutation_probe"),
            env_extra={
                "COVERAGE_FILE": str(data_file),
                "BAGEL_MUTATION_PROBE": str(probe_file),
                "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'scripts'}",
            },
        )
        probe = json.loads(probe_file.read_text()) if probe_file.exists() else {}
        _COVERAGE_RUNS[key] = (passed, data_file, probe, seconds)
    return _COVERAGE_RUNS[key]


def measure_coverage(module: str, tests: list[str], timeout: float = 3600) -> tuple[bool, Coverage, float]:
    """(the tests passed, which tests run which line of `module`, the seconds the tests took),
    from one coverage run with per-test contexts."""
    from coverage import CoverageData

    passed, data_file, probe, seconds = _coverage_run(tests, timeout)
    data = CoverageData(basename=str(data_file))
    data.read()
    target = str((PACKAGE / module).resolve())
    measured = [name for name in data.measured_files() if str(Path(name).resolve()) == target]
    by_line: dict[int, set[str]] = {}
    import_time: set[int] = set()
    for name in measured:
        for line, contexts in data.contexts_by_lineno(name).items():
            # pytest-cov names a context "<node id>|run" (or |setup / |teardown); "" is import time
            if "" in contexts:
                import_time.add(line)
            by_line.setdefault(line, set()).update(c.rsplit("|", 1)[0] for c in contexts if c)
    starters = tuple(probe.get("process_tests", ()))
    return passed, Coverage(by_line, frozenset(import_time), starters, probe.get("durations", {})), seconds


def _try(
    mutant: Mutant, tests: list[str], timeout: float, coverage: Coverage, confirm_survivors: bool = True
) -> tuple[Mutant, bool]:
    with tempfile.TemporaryDirectory(prefix="bagel-mutant-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        (src / "bagel_data" / mutant.module).write_text(mutant_source(mutant))
        selected, confirm = coverage.tests_for(mutant)
        if mutant.kind == "written":
            # Few, and each a bug someone could write: a survivor of the tests that ran its
            # lines is confirmed by the module's whole set, since a cached function
            # (lru_cache) runs its lines only for the first test that calls it.
            confirm = None
        elif selected and not confirm_survivors:
            confirm = []
        for chosen in (selected, tests if confirm is None else confirm):
            if chosen and not run_tests(chosen, src, timeout)[0]:
                return mutant, True
    return mutant, False


def _earlier_survivors(module: str, earlier: dict, mutants: list[Mutant]) -> list[Mutant]:
    """The mutants an earlier run left alive, checked to be the same changes of the same code."""
    by_index = {(m.kind, m.index): m for m in mutants}
    again = []
    for saved in earlier["survivors"]:
        mutant = by_index.get((saved.get("kind", "generated"), saved["index"]))
        if mutant is None or (mutant.before, mutant.after) != (saved["before"], saved["after"]):
            raise SystemExit(f"{module} changed since the earlier run: run it whole again")
        again.append(mutant)
    generated = sum(m.kind == "generated" for m in mutants)
    if generated != earlier.get("sites", earlier["mutants"]):  # a sampled run records its module's sites
        raise SystemExit(f"{module} changed since the earlier run: run it whole again")
    return again


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "modules", nargs="*", help="paths under src/bagel_data (default: every module but cli/, synthetic/)"
    )
    parser.add_argument("--list", action="store_true", help="print each module and its tests, then stop")
    parser.add_argument("--sample", type=int, default=0, help="at most this many mutants per module (seeded)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--triage",
        action="store_true",
        help="a mutant that survives the tests running its lines survives (skips the confirmation by the "
        "worker tests: faster, but may list a mutant that only a DataLoader-worker test kills)",
    )
    parser.add_argument(
        "--recheck",
        metavar="RESULTS",
        help="run again only the survivors listed in an earlier --out file (after new tests); the module "
        "must be unchanged since, and the score counts its earlier kills",
    )
    parser.add_argument(
        "--written", action="store_true", help="only the hand-written mutants (scripts/written_mutants.py)"
    )
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds before a mutant's test run is stopped and counted as killed (default: four times "
        "the module's tests without mutation, at least 120): a mutant that makes a test hang",
    )
    parser.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "bagel-mutation.json"))
    args = parser.parse_args()
    earlier = json.loads(Path(args.recheck).read_text()) if args.recheck else {}
    modules = args.modules or (list(earlier) if earlier else all_modules())
    if args.list:
        for module in modules:
            print(f"{module}: {' '.join(tests_for(module))}")
        return 0
    results = {}
    for module in modules:
        missing = [extra for extra in NEEDS.get(module, ()) if importlib.util.find_spec(extra) is None]
        if missing:  # its tests would all skip, and every mutant would survive for nothing
            print(f"{module}: not run, its tests need {', '.join(missing)} (the extra is not installed)", flush=True)
            continue
        tests = tests_for(module)
        passed, coverage, baseline = measure_coverage(module, tests)
        if not passed:
            print(f"{module}: the tests fail without any mutation; fix them first", file=sys.stderr)
            return 2
        generated = [] if args.written else mutants_of(module)
        written = written_mutants_of(module)
        sites = len(generated)
        if earlier:
            mutants = _earlier_survivors(module, earlier[module], generated + written)
            total = earlier[module]["mutants"]
        else:
            if args.sample and len(generated) > args.sample:
                generated = sorted(random.Random(args.seed).sample(generated, args.sample), key=lambda m: m.index)
            mutants = generated + written
            total = len(mutants)
        # Generous by default: a loaded machine must not kill mutants.
        timeout = args.timeout if args.timeout is not None else max(120.0, 4 * baseline)
        survivors = []
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            n = len(mutants)
            runs = pool.map(_try, mutants, [tests] * n, [timeout] * n, [coverage] * n, [not args.triage] * n)
            for mutant, killed in runs:
                if not killed:
                    survivors.append(mutant)
                    print(f"  survived {module}:{mutant.line}  {mutant.before!r} -> {mutant.after!r}", flush=True)
        killed = total - len(survivors)
        score = killed / total if total else 1.0
        written_total = earlier[module].get("written", 0) if earlier else len(written)
        written_killed = written_total - sum(m.kind == "written" for m in survivors)
        print(
            f"{module}: {killed}/{total} killed ({score:.0%}; written {written_killed}/{written_total}); "
            f"tests {baseline:.0f} s",
            flush=True,
        )
        results[module] = {
            "sites": sites,
            "mutants": total,
            "killed": killed,
            "score": round(score, 3),
            "written": written_total,
            "written_killed": written_killed,
            "survivors": [dataclasses.asdict(m) for m in survivors],
        }
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
