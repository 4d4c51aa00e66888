"""textnn's imports point down the layers and never go round in a cycle.

Every `import` and `from ... import` in textnn/ is read with `ast`, at module level and inside
functions alike (a function-level import still ties the two modules together, it only delays the
cost), and checked against LAYERS below, which follows the layer table of the design notes:

    errors, files (atomic writes, safe YAML), limits (the input-size policy), defaults (what the commands
    and the Python API do when not told), progress (bars, stage lines, --quiet)
    -> registry, data, modules, metrics, interop readers, weights, transfer (reading a start)
    -> config (the sections' dataclasses, YAML, overrides), runs (a run's files, its config.yaml as saved)
    -> models
    -> tasks, training, generation, viz
    -> resolve (a raw config made typed: the task and family it names looked up, its start opened, presets
       applied, the task's checks run; `textnn explain`)
    -> experiment (run loading, transfer into a model), sweep (searches over settings, on experiment)
    -> front (predict input read into a task's examples, flags into its options, predictions printed)
    -> server (`textnn serve`: the runs behind an HTTP API, standing on the front layer)
    -> cli, api, demo, __main__ (and the package itself, whose `textnn.load` reaches api)

A module may import modules of its own layer and of lower ones; anything else fails, naming the
importing module, the imported one, both layers and the line. A cycle among textnn's modules fails
too, even within one layer (it makes import order matter), with the modules that form it.

The registry (textnn/registry.py) maps names to "module:Class" strings and imports them only when a
name is asked for (resolve.py, experiment.py and the commands ask). Those strings are a table of
names, not imports: they are how the lower layers reach a family or a task without depending on
it, and they do not count here. They are checked instead to name modules in the layer their table
is for (ENCODERS: models, TASKS: tasks), so the table cannot become a way round the layers.

A task of the user's own is named in a config as "package.module:Class" (registry.outside_task) and lives
outside textnn/, so in no layer; the rule for it is that it stands where textnn's tasks stand, importing
the tasks layer and those below it, never experiment, front or the commands. The repository's examples of
one (examples/) are held to that here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "textnn"
EXAMPLES = PACKAGE.parent / "examples"  # tasks of one's own, outside the package (registry.outside_task)

# Lowest first. A name stands for the module of that name and every module below it (a package),
# except the names in EXACT, which stand for that one module only: "textnn" is the package's own
# __init__, and a new textnn/x.py must be placed in a layer by name, not fall into the top one.
EXACT = {"textnn"}
LAYERS: list[list[str]] = [
    ["textnn.errors", "textnn.files", "textnn.limits", "textnn.defaults", "textnn.progress"],
    ["textnn.registry", "textnn.data", "textnn.modules", "textnn.metrics", "textnn.interop", "textnn.weights",
     "textnn.transfer"],
    ["textnn.config", "textnn.runs"],
    ["textnn.models"],
    ["textnn.tasks", "textnn.training", "textnn.generation", "textnn.viz"],
    ["textnn.resolve"],
    ["textnn.experiment", "textnn.sweep"],
    ["textnn.front"],
    ["textnn.server"],
    ["textnn.cli", "textnn.api", "textnn.demo", "textnn.__main__", "textnn"],
]

LAYER_NAMES = ["errors, files, limits, defaults and progress", "readers and building blocks", "config", "models",
               "tasks, training, generation, viz", "resolution", "experiment", "front layer",
               "HTTP server", "commands"]


def module_name(path: Path) -> str:
    """textnn/data/vocab.py -> textnn.data.vocab; textnn/data/__init__.py -> textnn.data."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The textnn module `name` denotes: itself, or the module it is an attribute of
    (`from textnn.data import vocab` names textnn.data.vocab; `from textnn.config import Config` textnn.config)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported textnn module, line) for every import statement in the file, wherever it stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from ..data import y
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            targets = [f"{base_name}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if target == "textnn" or target.startswith("textnn."):
                resolved = resolve(target, modules)
                if resolved is not None and resolved != name:
                    found.append((resolved, node.lineno))
    return sorted(set(found))  # one entry per module and line (`from x import a, b` names x twice)


def layer_of(module: str) -> int:
    """The layer of `module`: that of the longest entry of LAYERS it is or lies under."""
    best, best_length = None, -1
    for index, entries in enumerate(LAYERS):
        for entry in entries:
            below = module.startswith(entry + ".") and entry not in EXACT
            if (module == entry or below) and len(entry) > best_length:
                best, best_length = index, len(entry)
    if best is None:
        raise AssertionError(f"{module} is in no layer of tests/unit/test_layering.py LAYERS; add it to the "
                             f"layer it belongs to")
    return best


def graph() -> dict[str, list[tuple[str, int]]]:
    modules = all_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(edges: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted({t for t, _ in edges[root]})))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted({t for t, _ in edges.get(child, [])}))))
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


def test_every_module_is_in_a_layer():
    unplaced = []
    for module in all_modules():
        try:
            layer_of(module)
        except AssertionError:
            unplaced.append(module)
    assert not unplaced, f"modules in no layer of LAYERS: {', '.join(unplaced)}; add each to its layer"


def test_imports_point_down_the_layers():
    upward = []
    for module, targets in graph().items():
        for target, line in targets:
            if layer_of(target) > layer_of(module):
                upward.append(f"{module.replace('.', '/')}.py:{line} imports {target}: layer "
                              f"{layer_of(target)} ({LAYER_NAMES[layer_of(target)]}) is above its own layer "
                              f"{layer_of(module)} ({LAYER_NAMES[layer_of(module)]}); a module imports only its "
                              f"own layer and lower ones: move the shared piece down, or take it as an argument")
    assert not upward, f"{len(upward)} import(s) pointing up:\n" + "\n".join(upward)


def test_no_import_cycles():
    edges = graph()
    found = cycles(edges)
    lines = []
    for component in found:
        members = set(component)
        links = [f"{m} -> {t} (line {line})" for m in component for t, line in edges[m] if t in members]
        lines.append(f"cycle of {len(component)} modules: {', '.join(component)}; its imports: {'; '.join(links)}")
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(lines)


@pytest.mark.parametrize("table, layer", [("ENCODERS", "textnn.models"), ("TASKS", "textnn.tasks")])
def test_registry_names_modules_of_its_layer(table, layer):
    from textnn import registry

    modules = all_modules()
    wrong = [f"{name} -> {target}" for name, target in getattr(registry, table).items()
             if target.split(":")[0] not in modules or layer_of(target.split(":")[0]) != layer_of(layer)]
    assert not wrong, f"registry.{table} names modules outside {layer} (or none): {', '.join(wrong)}"


def test_an_outside_task_stands_on_the_tasks_layer():
    modules = all_modules()
    files = sorted(EXAMPLES.rglob("*.py"))
    assert files, f"no example task under {EXAMPLES}"
    upward = []
    for path in files:
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for target, line in imports_of(name, path, modules):
            if layer_of(target) > layer_of("textnn.tasks"):
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target} (layer {layer_of(target)}, "
                              f"{LAYER_NAMES[layer_of(target)]})")
    assert not upward, ("a task of one's own imports what a task inside textnn would: the tasks layer and those "
                        "below it; these go above it:\n" + "\n".join(upward))


def test_the_checks_catch_an_upward_import_and_a_cycle():
    """The test itself: a made-up graph with one upward import and one cycle is caught by both checks."""
    edges = {"textnn.errors": [("textnn.config", 3)], "textnn.config": [("textnn.errors", 5)],
             "textnn.models.bert": [("textnn.config", 1)]}
    assert cycles(edges) == [["textnn.config", "textnn.errors"]]
    assert layer_of("textnn.config") > layer_of("textnn.errors")
    assert layer_of("textnn.models.bert") == layer_of("textnn.models") == 3
    assert layer_of("textnn") == len(LAYERS) - 1 and layer_of("textnn.data.vocab") == 1


def test_a_module_outside_the_table_is_in_no_layer():
    """The catch-all for the package itself matches it exactly: a new top-level module (or one under a
    new package) is placed in no layer until it is added to LAYERS, so the first test can fail."""
    for newcomer in ("textnn.serving", "textnn.newpackage.module"):
        with pytest.raises(AssertionError, match="in no layer"):
            layer_of(newcomer)


@pytest.mark.parametrize("module", ["textnn.config", "textnn.runs"])
def test_the_schema_looks_up_no_class_a_config_names(module):
    """config.py and runs.py sit below the models and tasks: they read and check a config's sections, and never
    look up (through the registry) the task or family a config names, nor run their code. That is resolution,
    above the tasks (textnn/resolve.py)."""
    modules = all_modules()
    found = [(target, line) for target, line in imports_of(module, modules[module], modules) if target == "textnn.registry"]
    assert not found, f"{module} imports textnn.registry (line {found[0][1]}); resolve classes in textnn/resolve.py"
