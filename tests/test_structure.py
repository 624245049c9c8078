"""The module reads top to bottom: each section uses only what stands above it, and no
function is longer than 60 lines."""

import ast
import importlib.util
import re
import subprocess
import sys

import pytest

from conftest import TOOL

SOURCE = TOOL.read_text(encoding="utf-8")
SECTION = re.compile(r"^# --- (.+) ---$")


def top_level_definitions():
    """Return {name: (section number, node)} of the module's top-level definitions."""
    sections = [i + 1 for i, line in enumerate(SOURCE.splitlines()) if SECTION.match(line)]
    found = {}
    for node in ast.parse(SOURCE).body:
        for name in bound_names(node):
            found[name] = (sum(1 for s in sections if s < node.lineno), node)
    return found


def test_sections_are_listed_in_the_module_docstring_in_order():
    sections = [m.group(1) for line in SOURCE.splitlines() if (m := SECTION.match(line))]
    docstring = ast.get_docstring(ast.parse(SOURCE))
    listed = [line.strip().split("  ")[0] for line in docstring.splitlines()
              if line.startswith("    ") and "  " in line.strip()]
    assert listed == sections


def test_no_section_uses_a_section_below_it():
    definitions = top_level_definitions()
    uses_below = []
    for name, (section, node) in definitions.items():
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load) \
                    and inner.id in definitions \
                    and definitions[inner.id][0] > section:
                uses_below.append(f"{name} uses {inner.id}")
    assert sorted(set(uses_below)) == []


def test_no_function_is_longer_than_60_lines():
    long = [f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
            for node in ast.walk(ast.parse(SOURCE))
            if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 60]
    assert long == []


def parameters_of(node):
    """Return the names of a function's parameters besides self and cls: positional-only,
    positional, *args, keyword-only and **kwargs alike."""
    arguments = node.args
    names = [a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
    names += [a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def functions_with_names(tree, prefix=""):
    """Yield (qualified name, node) of every function, method, nested function and lambda."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node
            yield from functions_with_names(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions_with_names(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.Lambda):
            yield f"{prefix}<lambda at line {node.lineno}>", node
            yield from functions_with_names(node, prefix)
        else:
            yield from functions_with_names(node, prefix)


def test_every_function_takes_at_most_six_parameters_besides_self():
    many = [f"{name}: {len(parameters_of(node))} ({', '.join(parameters_of(node))})"
            for name, node in functions_with_names(ast.parse(SOURCE))
            if len(parameters_of(node)) > 6]
    assert many == []


def test_the_parameter_count_sees_every_kind_of_parameter():
    tree = ast.parse("class C:\n"
                     "    def method(self, a, /, b, *args, c, **kwargs): pass\n"
                     "    @classmethod\n"
                     "    def make(cls, a, b=1, *, c=2): pass\n"
                     "def outer(a):\n"
                     "    def inner(a, b, c, d, e, f, g): pass\n"
                     "    return lambda x, y, *z: inner\n")
    found = {name: parameters_of(node) for name, node in functions_with_names(tree)}
    assert found == {"C.method": ["a", "b", "c", "args", "kwargs"], "C.make": ["a", "b", "c"],
                     "outer": ["a"], "outer.inner": ["a", "b", "c", "d", "e", "f", "g"],
                     "outer.<lambda at line 7>": ["x", "y", "z"]}


@pytest.mark.parametrize("target", [[], ["--python-version", "3.10"]],
                         ids=["this-python", "python-3.10"])
def test_mypy_in_its_default_mode_finds_no_error(target):
    """The module type-checks clean in mypy's default mode (the README's test command
    installs mypy==2.4.1 from Python 3.10 on), for this Python and for 3.10, the oldest that
    mypy 2.4.1 can target; the module's floor, 3.9, it cannot (the CI's one-file runs under
    each python3.X cover 3.9)."""
    if sys.version_info < (3, 10) and importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy 2.4.1 needs Python 3.10 or newer")
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary",
                             "--no-color-output", *target, TOOL.name], cwd=TOOL.parent,
                            capture_output=True, text=True, timeout=300)
    assert "No module named mypy" not in result.stderr, \
        "mypy is not installed: the README's test command installs mypy==2.4.1"
    assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), \
        f"mypy exit {result.returncode}:\n{result.stdout}{result.stderr}"


# Each section starts with its public line: the names a later section uses, sorted, under the
# section line (`# public: A, B`, continued on comment lines indented to its first name where
# it passes 100 characters; `# public: (none)` where no later section uses the section).
# /work/layout/public_lines.py in the team's tools writes it; this test only reads it.
PUBLIC = "# public: "
CONTINUED = "#" + " " * (len(PUBLIC) - 1)


def bound_names(node):
    """Return the top-level names a statement binds: a def, a class, an assignment (a tuple's
    names and an annotated one included)."""
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, ast.AnnAssign) else []
    return [n.id for t in targets for n in ast.walk(t)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def public_line_problems(source):
    """Return what is wrong with the public lines of a module's sections, one line each."""
    lines = source.splitlines()
    starts = [i for i, line in enumerate(lines) if SECTION.match(line)]
    home = {}
    tree = ast.parse(source)
    for node in tree.body:
        for name in bound_names(node):
            home.setdefault(name, sum(1 for s in starts if s < node.lineno))
    used_later = {k: set() for k in range(1, len(starts) + 1)}
    for node in tree.body:
        section = sum(1 for s in starts if s < node.lineno)
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load) \
                    and 0 < home.get(inner.id, 0) < section:
                used_later[home[inner.id]].add(inner.id)
    problems = []
    for k, start in enumerate(starts, 1):
        title = SECTION.match(lines[start]).group(1)
        paragraph = [lines[start + 1]] if start + 1 < len(lines) else []
        if not paragraph or not paragraph[0].startswith(PUBLIC):
            problems.append(f"{title}: no public line under the section line")
            continue
        for line in lines[start + 2:]:
            if not line.startswith(CONTINUED) or not line[len(CONTINUED):][:1].strip():
                break
            paragraph.append(line)
        text = " ".join([paragraph[0][len(PUBLIC):]] + [p[len(CONTINUED):] for p in paragraph[1:]])
        listed = [] if text == "(none)" else [n.strip() for n in text.split(",")]
        want = used_later[k]
        missing, extra = sorted(want - set(listed)), sorted(set(listed) - want)
        if missing:
            problems.append(f"{title}: used below but not on its public line: {', '.join(missing)}")
        if extra:
            problems.append(f"{title}: on its public line but used by no later section: "
                            f"{', '.join(extra)}")
        if not missing and not extra and listed != sorted(listed):
            problems.append(f"{title}: public line not sorted, or a name listed twice")
        if not want and text != "(none)":
            problems.append(f"{title}: public line of a section nothing below uses is not (none)")
        if any(len(line) > 100 for line in paragraph):
            problems.append(f"{title}: public line longer than 100 characters")
    return problems


def test_every_section_starts_with_the_names_later_sections_use():
    assert public_line_problems(SOURCE) == []


def test_a_public_line_with_a_name_missing_or_extra_is_found():
    lines = SOURCE.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(PUBLIC))
    title = SECTION.match(lines[first - 1]).group(1)
    name = lines[first][len(PUBLIC):].split(",")[0]
    cases = {
        lines[first].replace(f" {name},", "", 1): f"{title}: used below but not on its public "
                                                   f"line: {name}",
        lines[first].replace(PUBLIC, PUBLIC + "AAA_NOT_USED, ", 1): f"{title}: on its public "
                                                                  f"line but used by no later "
                                                                  f"section: AAA_NOT_USED",
        "#": f"{title}: no public line under the section line",
    }
    for line, problem in cases.items():
        changed = "\n".join(lines[:first] + [line] + lines[first + 1:])
        assert problem in public_line_problems(changed)
