"""No module includes a header that leads back to it: a module is a .h with its .cpp/.cu of the same
name, and an edge is an #include "..." of another module's header. Prints each cycle; exit 1 if any.

Usage: module_cycles.py SOURCE_DIR
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
edges = {}
for path in root.glob("*/**/*"):
    if path.suffix not in {".h", ".cuh", ".cpp", ".cu"} or path.parts[len(root.parts)] not in {"app", "kernels", "reference"}:
        continue
    module = str(path.relative_to(root).with_suffix(""))
    for header in re.findall(r'^#include "([^"]+)"', path.read_text(), re.M):
        target = str(pathlib.Path(header).with_suffix(""))
        if target != module:
            edges.setdefault(module, set()).add(target)

cycles = set()
for start in edges:
    stack = [(start, [start])]
    while stack:
        node, path = stack.pop()
        for target in edges.get(node, ()):
            if target == start:
                cycles.add(tuple(path[path.index(min(path)):] + path[:path.index(min(path))]))
            elif target not in path:
                stack.append((target, path + [target]))
for cycle in sorted(cycles):
    print("module cycle: " + " -> ".join(cycle + (cycle[0],)))
print(f"{len(edges)} modules, {sum(len(t) for t in edges.values())} includes, {len(cycles)} cycles")
sys.exit(1 if cycles else 0)
