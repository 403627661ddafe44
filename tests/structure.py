"""The code's shape, from its includes:
- layers: every source under app/, kernels/ and reference/ belongs to the layer of the nearest folder
  whose CMakeLists.txt declares one (attnres_layer(NAME ... LAYERS lower ...)), and includes only
  headers of its own layer or of the layers below it, as the CMake targets link them;
- modules: no module (a .h with its .cpp/.cu of the same name) includes a header that leads back to it.
Prints each violation; exit 1 if any.

Usage: structure.py SOURCE_DIR
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
SOURCE_SUFFIXES = {".h", ".cuh", ".cpp", ".cu"}
TOP_FOLDERS = {"app", "kernels", "reference"}


def sources():
    for path in sorted(root.glob("*/**/*")):
        if path.suffix in SOURCE_SUFFIXES and path.parts[len(root.parts)] in TOP_FOLDERS:
            yield path


def includes(path):
    return re.findall(r'^#include "([^"]+)"', path.read_text(), re.M)


# Layers: folder -> name, name -> the layers it links.
folder_layer, links = {}, {}
for cmake in root.glob("*/**/CMakeLists.txt"):
    if cmake.parts[len(root.parts)] not in TOP_FOLDERS:
        continue
    for call in re.findall(r"attnres_layer\(([^)]*)\)", cmake.read_text()):
        words = call.split()
        name = words[0]
        folder_layer[cmake.parent.relative_to(root)] = name
        below = []
        if "LAYERS" in words:
            for word in words[words.index("LAYERS") + 1:]:
                if word.isupper():
                    break
                below.append(word)
        links[name] = below


def layer_of(relative):
    for folder in relative.parents:
        if folder in folder_layer:
            return folder_layer[folder]
    return None


def reachable(name):
    seen, stack = set(), [name]
    while stack:
        for lower in links.get(stack.pop(), []):
            if lower not in seen:
                seen.add(lower)
                stack.append(lower)
    return seen


problems = []
for name, below in links.items():
    if name in reachable(name):
        problems.append(f"layer cycle through {name}")
    problems += [f"layer {name} links {lower}, which no CMakeLists.txt declares" for lower in below if lower not in links]

edges = {}
for path in sources():
    relative = path.relative_to(root)
    layer = layer_of(relative)
    if layer is None:
        problems.append(f"{relative}: in no layer (no attnres_layer in a CMakeLists.txt above it)")
        continue
    module = str(relative.with_suffix(""))
    for header in includes(path):
        target_layer = layer_of(pathlib.Path(header))
        if target_layer is not None and target_layer != layer and target_layer not in reachable(layer):
            problems.append(f"{relative} (layer {layer}) includes {header} (layer {target_layer}), "
                            f"which {layer} does not link")
        target = str(pathlib.Path(header).with_suffix(""))
        if target != module:
            edges.setdefault(module, set()).add(target)

cycles = set()
for start in edges:
    stack = [(start, [start])]
    while stack:
        node, walk = stack.pop()
        for target in edges.get(node, ()):
            if target == start:
                low = walk.index(min(walk))
                cycles.add(tuple(walk[low:] + walk[:low]))
            elif target not in walk:
                stack.append((target, walk + [target]))
problems += ["module cycle: " + " -> ".join(cycle + (cycle[0],)) for cycle in sorted(cycles)]

for problem in problems:
    print(problem)
print(f"{len(links)} layers, {len(edges)} modules, {sum(len(t) for t in edges.values())} includes, "
      f"{len(problems)} problems")
sys.exit(1 if problems else 0)
