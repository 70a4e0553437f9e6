"""The project's modules import one another without a circle.

Every ``import`` counts, at module level or inside a function (a lazy import
still ties the two modules together), read from the source with ``ast``:
nothing is imported to build the graph. ``from pkg import name`` is an edge to
``pkg.name`` when that is a module of the project, else to ``pkg`` (its
``__init__``). A package's own ``__init__`` is not an edge of every import of
one of its submodules (Python runs it first, but it is not a dependency the
importing module chose).
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("accounts", "sdk/steerboard_agents", "sdk/steerboard_protocol", "config", "delegation", "demo", "frontend", "mailbox", "teams")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "sdk":  # the SDK's distribution folder: its package is the import name
        parts.pop(0)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _imported(tree: ast.AST, module: str, is_package: bool, modules: dict[str, Path]) -> set[str]:
    """The project modules one module's source imports, anywhere in it."""
    out: set[str] = set()

    def add(name: str) -> None:
        # ``import a.b.c`` or a name inside a module: the longest prefix that is a project module.
        parts = name.split(".")
        while parts:
            candidate = ".".join(parts)
            if candidate in modules:
                out.add(candidate)
                return
            parts.pop()

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in modules:
                    out.add(submodule)
                else:
                    add(base)
    out.discard(module)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {
        name: _imported(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py", modules)
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[dict]:
    """Each strongly connected group of modules (Tarjan), with one circle through it:
    ``{"modules": [...], "circle": [start, ..., start]}``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)

    found = []
    for group in groups:
        start = min(group)
        found.append({"modules": sorted(group), "circle": _shortest_circle(graph, group, start)})
    return found


def _shortest_circle(graph: dict[str, set[str]], group: set[str], start: str) -> list[str]:
    """The shortest way from ``start`` back to itself inside ``group`` (breadth first)."""
    previous: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        current = queue.pop(0)
        for nxt in sorted(graph[current] & group):
            if nxt == start:
                path = [current]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])
                return path[::-1] + [start]
            if nxt not in previous:
                previous[nxt] = current
                queue.append(nxt)
    raise AssertionError(f"{start} is on no circle of its group")  # a group is strongly connected


def test_the_graph_sees_lazy_imports_submodules_and_relative_imports():
    source = (
        "from mailbox.models import TeamMessage\n"
        "def f():\n"
        "    from mailbox import delivery, outage\n"
        "    import teams.models\n"
        "    from . import db\n"
    )
    modules = dict.fromkeys(
        ["mailbox", "mailbox.delivery", "mailbox.db", "mailbox.models", "mailbox.x", "teams.models"]
    )
    # ``outage`` is no module here: the edge is to the package it was imported from
    assert _imported(ast.parse(source), "mailbox.x", False, modules) == {
        "mailbox.models", "mailbox.delivery", "mailbox", "teams.models", "mailbox.db"
    }
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        {"modules": ["a", "b", "c"], "circle": ["a", "b", "c", "a"]}
    ]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_among_project_modules():
    graph = import_graph()
    assert graph.get("mailbox.engine.delivery"), "the graph found no imports: is ROOT right?"
    found = cycles(graph)
    report = "\n".join(
        f"circle: {' -> '.join(each['circle'])}\n  all of: {', '.join(each['modules'])}\n"
        + "".join(
            f"  {module} imports {', '.join(sorted(graph[module] & set(each['modules'])))}\n"
            for module in each["modules"]
        )
        for each in found
    )
    if found:
        print(report)
    assert not found, "import circles among project modules:\n" + report


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded to top-level packages: an edge where any module of one
    imports any module of another (docs/code.md, "Imports")."""
    folded: dict[str, set[str]] = {}
    for module, imported in graph.items():
        package = module.split(".")[0]
        folded.setdefault(package, set()).update(
            name.split(".")[0] for name in imported if name.split(".")[0] != package
        )
    return folded


# Which package may import which (docs/code.md, "Imports"): the SDK nothing of the server; teams
# (the roster and the board) and accounts (people) nothing of the mailbox, A2A or the dashboard;
# the mailbox nothing of the transports above it. Only the demo (which runs a team host and its
# sessions beside the server) imports the SDK, and nothing of the server imports the demo.
SERVER = {"accounts", "config", "delegation", "demo", "frontend", "mailbox", "teams"}
NOT_THE_SDK_NOR_THE_DEMO = {"steerboard_agents", "demo"}
MAY_NOT_IMPORT = {
    "steerboard_protocol": SERVER | {"steerboard_agents"},
    "steerboard_agents": SERVER,
    "teams": {"accounts", "delegation", "frontend", "mailbox"} | NOT_THE_SDK_NOR_THE_DEMO,
    "accounts": {"delegation", "frontend", "mailbox"} | NOT_THE_SDK_NOR_THE_DEMO,
    "mailbox": {"delegation", "frontend"} | NOT_THE_SDK_NOR_THE_DEMO,
    "delegation": {"frontend"} | NOT_THE_SDK_NOR_THE_DEMO,
    "frontend": NOT_THE_SDK_NOR_THE_DEMO,
    "config": NOT_THE_SDK_NOR_THE_DEMO,
}


def test_no_import_circle_among_packages_and_no_layer_broken():
    graph = import_graph()
    packages = package_graph(graph)
    assert {"mailbox", "teams", "steerboard_agents"} <= set(packages)
    found = cycles(packages)
    assert not found, "import circles among packages: " + "; ".join(" -> ".join(each["circle"]) for each in found)
    broken = [
        f"{module} imports {name}"
        for module, imported in sorted(graph.items())
        for name in sorted(imported)
        if name.split(".")[0] in MAY_NOT_IMPORT.get(module.split(".")[0], ())
    ]
    assert not broken, "layer rules broken (docs/code.md, \"Imports\"):\n" + "\n".join(broken)


def test_the_protocol_package_imports_nothing_of_either_side():
    graph = import_graph()
    protocol = {m: deps for m, deps in graph.items() if m.startswith("steerboard_protocol")}
    assert protocol, "sdk/steerboard_protocol is not read"
    assert all(dep.startswith("steerboard_protocol") for deps in protocol.values() for dep in deps), protocol


# The transports (docs/code.md, "Imports"): they parse, call a service or a selector, and
# render. Below them the services and selectors, which import no transport; the transports
# query no model themselves (no ORM manager in their source).
TRANSPORTS = (
    "config.asgi", "delegation.handler", "delegation.server", "frontend.console_views", "frontend.consumers",
    "frontend.views", "mailbox.transports.api", "mailbox.transports.consumers", "mailbox.transports.edge",
    "mailbox.transports.mcp_server",
)
# What wires the transports to their paths (and the app that registers the OpenAPI extension),
# and the command that drives the whole product.
WIRING = ("config", "mailbox.apps", "mailbox.urls", "mailbox.routing", "frontend.urls", "frontend.routing", "demo")


def _is(module: str, names: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


def test_no_service_imports_a_transport_and_no_transport_queries_a_model():
    graph = import_graph()
    assert _is("mailbox.transports.api.inbox", TRANSPORTS) and "mailbox.transports.consumers" in graph
    upward = [
        f"{module} imports {name}"
        for module, imported in sorted(graph.items())
        if not _is(module, TRANSPORTS) and not _is(module, WIRING)
        for name in sorted(imported)
        if _is(name, TRANSPORTS)
    ]
    assert not upward, "services and selectors import no transport (docs/code.md, \"Imports\"):\n" + "\n".join(upward)
    modules = project_modules()
    querying = [
        f"{name}:{node.lineno}"
        for name, path in sorted(modules.items())
        if _is(name, TRANSPORTS)
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute) and node.attr == "objects"
    ]
    assert not querying, "a transport queries the ORM itself; read through a selector or a service:\n" + "\n".join(querying)


# The mailbox's top holds the Django app and what every part reads; each other module lives in
# the package of its part of the design (docs/code.md, "The mailbox").
MAILBOX_TOP = {"__init__.py", "apps.py", "models.py", "selectors.py", "text_match.py", "message_query.py",
               "urls.py", "routing.py", "migrations", "management"}
MAILBOX_PARTS = {"engine", "members", "transports", "operations", "plumbing"}


def test_the_mailbox_top_holds_the_app_and_its_parts_only():
    top = {p.name for p in (ROOT / "mailbox").iterdir() if p.name != "__pycache__"}
    assert top - MAILBOX_TOP - MAILBOX_PARTS == set(), (
        "a module at mailbox/'s top: put it in the package of its part (docs/code.md, \"The mailbox\")"
    )
    assert MAILBOX_PARTS <= top


def sibling_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The module graph folded to ``package``'s children (its modules and sub-packages):
    an edge where anything under one imports anything under another."""
    def child(module: str) -> str | None:
        if not module.startswith(package + "."):
            return None
        return package + "." + module[len(package) + 1:].split(".")[0]

    folded: dict[str, set[str]] = {}
    for module, imported in graph.items():
        mine = child(module)
        if mine is None:
            continue
        folded.setdefault(mine, set()).update(c for c in map(child, imported) if c is not None and c != mine)
    return folded


def test_no_import_circle_among_the_parts_of_any_package():
    """Not only modules and top-level packages: inside every package its sub-packages and
    modules import one another without a circle (mailbox's engine, members, ... each a unit)."""
    assert cycles(sibling_graph({"p.a.x": {"p.b.y"}, "p.b.y": {"p.a.z"}, "p.a.z": set()}, "p")) == [
        {"modules": ["p.a", "p.b"], "circle": ["p.a", "p.b", "p.a"]}
    ]
    graph = import_graph()
    packages = sorted({m for m, path in project_modules().items() if path.name == "__init__.py"})
    assert "mailbox.engine" in packages
    found = [
        f"{package}: {' -> '.join(each['circle'])}"
        for package in packages
        for each in cycles(sibling_graph(graph, package))
    ]
    assert not found, "import circles among the parts of a package:\n" + "\n".join(found)


# The mailbox's parts, top to bottom (docs/code.md, "The mailbox"): each imports only the parts
# below it. The app's own modules at mailbox/'s top (models, selectors, message_query,
# text_match) import none of the parts; what wires the app (apps, urls, routing, management)
# imports any.
MAILBOX_LAYERS = ("transports", "operations", "members", "engine", "plumbing")
MAILBOX_OWN = ("models", "selectors", "message_query", "text_match", "migrations")


def test_the_mailbox_parts_import_only_the_parts_below_them():
    graph = import_graph()
    assert set(MAILBOX_LAYERS) == MAILBOX_PARTS

    def rank(module: str) -> int | None:
        parts = module.split(".")
        if parts[0] != "mailbox" or len(parts) < 2:
            return None
        if parts[1] in MAILBOX_LAYERS:
            return MAILBOX_LAYERS.index(parts[1])
        return len(MAILBOX_LAYERS) if parts[1] in MAILBOX_OWN else None

    broken = [
        f"{module} imports {name}"
        for module, imported in sorted(graph.items())
        if (mine := rank(module)) is not None
        for name in sorted(imported)
        if (theirs := rank(name)) is not None and theirs < mine
    ]
    assert not broken, "a mailbox part imports one above it (docs/code.md, \"The mailbox\"):\n" + "\n".join(broken)
