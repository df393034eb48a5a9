"""A small mutation-testing harness: does the test suite notice when the code is wrong?

For each core module it applies one small change at a time (a comparison flipped, an
arithmetic or boolean operator swapped, a constant moved by one, a `not` removed, a
`break`/`continue` removed) to a private copy of `src/`, runs the tests that cover that
module, and counts the mutant as *killed* when they fail (or time out). Survivors are
printed with their line, so each one can be read and either killed by a new test or
explained as equivalent (docs/testing.md keeps the last run's list).

    python scripts/mutate.py                       # every core module (slow: hours on 2 cores)
    python scripts/mutate.py packing/pack.py       # one module
    python scripts/mutate.py --sample 40 --jobs 2  # a seeded sample of 40 mutants per module

It is deliberately not part of CI; run it before a release and whenever a core module
changes. Results go to --out (JSON) as well as the terminal.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import copy
import dataclasses
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
    "packing/pack.py": ["tests/packing", "tests/conformance/test_golden_packed.py"],
    "packing/packed_dataset.py": [
        "tests/packing",
        "tests/checkpoint",
        "tests/dropin",
        "tests/conformance/test_golden_packed.py",
    ],
    "packing/placement.py": [
        "tests/packing",
        "tests/checkpoint",
        "tests/dropin",
        "tests/conformance/test_golden_packed.py",
    ],
    "packing/stream_state.py": ["tests/checkpoint", "tests/dropin", "tests/packing"],  # incl. compat resume
    "packing/strategies.py": ["tests/packing"],
    "packing/layout.py": ["tests/packing", "tests/conformance/test_golden_packed.py"],
    "sharding.py": ["tests/test_sharding.py", "tests/checkpoint", "tests/families", "tests/conformance"],
    "families/base.py": ["tests/test_sharding.py", "tests/checkpoint", "tests/families", "tests/conformance"],
    "families/units.py": ["tests/test_sharding.py", "tests/checkpoint", "tests/families", "tests/conformance"],
    "checkpoint/state.py": ["tests/checkpoint"],
    "checkpoint/restart.py": ["tests/checkpoint"],
    "checkpoint/merge.py": ["tests/checkpoint"],
    "sources/parquet.py": ["tests/sources", "tests/families", "tests/test_sharding.py"],
    "sources/jsonl.py": ["tests/sources", "tests/families/test_vlm.py"],
    "families/t2i.py": ["tests/families", "tests/conformance/test_golden_stream.py", "tests/test_bad_data.py"],
    "families/edit.py": ["tests/families", "tests/conformance/test_golden_stream.py", "tests/test_bad_data.py"],
    "families/vlm.py": ["tests/families", "tests/conformance/test_golden_stream.py", "tests/test_bad_data.py"],
    "families/conversation.py": ["tests/families", "tests/conformance/test_golden_stream.py"],
}

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
    index: int  # the index-th mutable site of the module, in `ast.walk` order
    line: int
    before: str
    after: str


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


def mutants_of(module: str) -> list[Mutant]:
    source = (PACKAGE / module).read_text()
    found = []
    for index, (node, kind) in enumerate(_sites(ast.parse(source))):
        before = ast.get_source_segment(source, node) or type(node).__name__.lower()
        clone = copy.deepcopy(node)
        after = ast.unparse(_apply(clone, kind) or clone)
        found.append(Mutant(module, index, getattr(node, "lineno", 0), before.strip()[:80], after.strip()[:80]))
    return found


def mutated_source(module: str, index: int) -> str:
    tree = ast.parse((PACKAGE / module).read_text())
    node, kind = _sites(tree)[index]
    replacement = _apply(node, kind)
    if replacement is not node and replacement is not None:
        ast.copy_location(replacement, node)
        tree = _Replace(node, replacement).visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree))


def run_tests(tests: list[str], src: Path, timeout: float) -> tuple[bool, float]:
    """(the tests passed, seconds) with `src` first on the import path."""
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONDONTWRITEBYTECODE="1")
    start = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", *tests]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, time.monotonic() - start
    return done.returncode == 0, time.monotonic() - start


def _try(mutant: Mutant, tests: list[str], timeout: float) -> tuple[Mutant, bool]:
    with tempfile.TemporaryDirectory(prefix="bagel-mutant-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        (src / "bagel_data" / mutant.module).write_text(mutated_source(mutant.module, mutant.index))
        passed, _ = run_tests(tests, src, timeout)
    return mutant, not passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help="paths under src/bagel_data (default: every core module)")
    parser.add_argument("--sample", type=int, default=0, help="at most this many mutants per module (seeded)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "bagel-mutation.json"))
    args = parser.parse_args()
    modules = args.modules or list(CORE)
    results = {}
    for module in modules:
        tests = CORE.get(module, ["tests"])
        passed, baseline = run_tests(tests, ROOT / "src", timeout=3600)
        if not passed:
            print(f"{module}: the tests fail without any mutation; fix them first", file=sys.stderr)
            return 2
        mutants = mutants_of(module)
        if args.sample and len(mutants) > args.sample:
            mutants = sorted(random.Random(args.seed).sample(mutants, args.sample), key=lambda m: m.index)
        timeout = max(30.0, 3 * baseline)
        survivors = []
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for mutant, killed in pool.map(_try, mutants, [tests] * len(mutants), [timeout] * len(mutants)):
                if not killed:
                    survivors.append(mutant)
                    print(f"  survived {module}:{mutant.line}  {mutant.before!r} -> {mutant.after!r}", flush=True)
        killed = len(mutants) - len(survivors)
        score = killed / len(mutants) if mutants else 1.0
        print(f"{module}: {killed}/{len(mutants)} killed ({score:.0%}); tests {baseline:.0f} s", flush=True)
        results[module] = {
            "mutants": len(mutants),
            "killed": killed,
            "score": round(score, 3),
            "survivors": [dataclasses.asdict(m) for m in survivors],
        }
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
