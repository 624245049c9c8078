"""The module reads top to bottom: each section uses only what stands above it, and no
function is longer than 60 lines."""

import ast
import re

from conftest import TOOL

SOURCE = TOOL.read_text(encoding="utf-8")
SECTION = re.compile(r"^# --- (.+) ---$")


def top_level_definitions():
    """Return {name: (section number, node)} of the module's top-level definitions."""
    sections = [i + 1 for i, line in enumerate(SOURCE.splitlines()) if SECTION.match(line)]
    found = {}
    for node in ast.parse(SOURCE).body:
        names = []
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        for name in names:
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
