"""The code-review table of issue 24, measured: source files and lines, files over 300 and
400 lines, bare `Any` annotations, getattr/hasattr probes, import cycles (lazy imports
included; and with the `if TYPE_CHECKING:` imports too), mypy errors with and without the not-yet-clean list, and repeated-code pairs.

    python bench/code_metrics.py [--json bench/results/code_metrics.json] [--no-mypy]

Source = the four packages app/ engine/ agent/ tools/ (tests and bench apart). The
repeated-code count comes from the `duplicates` command when it is on PATH (whole tree).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "engine", "agent", "tools")


def source_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["m3agent", *parts])


def _is_any(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "Any"
    if isinstance(node, ast.Attribute):
        return node.attr == "Any"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.strip() == "Any"
    return False


def bare_any(tree: ast.AST) -> int:
    """Annotations that are exactly `Any` (an argument, a return, a variable), not `Any`
    inside a container type."""
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            count += _is_any(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            count += _is_any(node.returns)
        elif isinstance(node, ast.AnnAssign):
            count += _is_any(node.annotation)
    return count


def probes(tree: ast.AST) -> tuple[int, int]:
    """(probes, all calls): a probe asks whether an object has an attribute (`hasattr`, or
    `getattr` with a default); a two-argument `getattr` is a plain dynamic lookup."""
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
    ]
    asked = [
        c
        for c in calls
        if isinstance(c.func, ast.Name) and (c.func.id == "hasattr" or len(c.args) == 3)
    ]
    return len(asked), len(calls)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the statements under `if TYPE_CHECKING:` (never executed)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                inside.update(id(n) for n in ast.walk(stmt))
    return inside


def imports_of(path: Path, tree: ast.AST, known: set[str], types_too: bool = True) -> set[str]:
    """Every m3agent module this file imports, at the top or inside a function (lazy), and
    with types_too those under `if TYPE_CHECKING:` as well."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    skip = set() if types_too else _type_checking_nodes(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != here:
                found.add(name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def without_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """An `__init__` that re-exports its children forms a trivial loop with each child that
    imports a sibling through the package; those edges are not design cycles."""
    return {
        mod: {dep for dep in deps if not mod.startswith(dep + ".")} for mod, deps in graph.items()
    }


MYPY_FARM = ROOT / ".mypy_farm"


def mypy_errors(strip_ignore_list: bool) -> int | None:
    if shutil.which("mypy") is None and not _has_module("mypy"):
        return None
    farm = MYPY_FARM / "m3agent"
    farm.mkdir(parents=True, exist_ok=True)
    for pkg in PACKAGES:
        link = farm / pkg
        if not link.exists():
            link.symlink_to(ROOT / pkg)
    config = (ROOT / "pyproject.toml").read_text()
    if strip_ignore_list:
        config = re.sub(
            r"\[\[tool\.mypy\.overrides\]\]\nmodule = \[[^\]]*\]\nignore_errors = true\n",
            "",
            config,
        )
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "pyproject.toml"
        cfg.write_text(config)
        args = [sys.executable, "-m", "mypy", "--config-file", str(cfg)]
        for pkg in PACKAGES:
            args += ["-p", f"m3agent.{pkg}"]
        out = subprocess.run(args, cwd=MYPY_FARM, capture_output=True, text=True).stdout
    match = re.search(r"Found (\d+) errors?", out)
    return int(match.group(1)) if match else (0 if "Success" in out else None)


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def duplicate_pairs() -> int | None:
    if shutil.which("duplicates") is None:
        return None
    out = subprocess.run(
        ["duplicates", "--seconds", "300", "--most", "1"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    match = re.match(r"(\d+) pairs", out)
    return int(match.group(1)) if match else None


def measure(with_mypy: bool) -> dict[str, object]:
    files = source_files()
    known = {module_name(p) for p in files}
    graph: dict[str, set[str]] = {}
    runtime: dict[str, set[str]] = {}
    lines: dict[str, int] = {}
    any_count = probe_count = lookup_count = 0
    per_package_any: dict[str, int] = dict.fromkeys(PACKAGES, 0)
    per_package_probes: dict[str, int] = dict.fromkeys(PACKAGES, 0)
    for path in files:
        text = path.read_text()
        tree = ast.parse(text)
        rel = str(path.relative_to(ROOT))
        lines[rel] = len(text.splitlines())
        pkg = path.relative_to(ROOT).parts[0]
        a, (p, calls) = bare_any(tree), probes(tree)
        any_count += a
        probe_count += p
        lookup_count += calls
        per_package_any[pkg] += a
        per_package_probes[pkg] += p
        graph[module_name(path)] = imports_of(path, tree, known)
        runtime[module_name(path)] = imports_of(path, tree, known, types_too=False)
    result: dict[str, object] = {
        "source_files": len(files),
        "source_lines": sum(lines.values()),
        "files_over_300": sorted(f for f, n in lines.items() if n > 300),
        "files_over_400": {f: n for f, n in sorted(lines.items()) if n > 400},
        "bare_any": any_count,
        "bare_any_by_package": per_package_any,
        "probes_hasattr_or_getattr_default": probe_count,
        "probes_by_package": per_package_probes,
        "getattr_hasattr_calls": lookup_count,
        "import_cycles_runtime": cycles(without_package_inits(runtime)),
        "import_cycles_with_type_imports": cycles(without_package_inits(graph)),
        "duplicate_pairs": duplicate_pairs(),
    }
    if with_mypy:
        result["mypy_errors_ci"] = mypy_errors(strip_ignore_list=False)
        result["mypy_errors_all_modules"] = mypy_errors(strip_ignore_list=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the result here too")
    parser.add_argument("--no-mypy", action="store_true", help="skip the two mypy runs")
    args = parser.parse_args()
    t0 = time.perf_counter()
    result = measure(with_mypy=not args.no_mypy)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
