#!/usr/bin/env python3
"""The folders of src/ are layers: no folder includes, directly or through others, a folder that includes it.

  check_layers.py [SOURCE_ROOT]     (default: the checkout this script lives in)

Reads every `#include "..."` of src/**/*.{hpp,cpp,h} that names a file under src/ (acc/... headers of
base/ and capi/, and generated headers, are outside the graph) and makes the graph folder -> folders it
includes; models/ and models/hf/ are two folders. A cycle fails, named with the include lines that close it.
Includes alone do not show a class implemented by another folder (a folder above it may define its methods), so
the definitions are read too: a method defined (`Class::name(` at the start of a line) in another folder than the
header that declares the class fails. Without either it prints the folders layer by layer, each above everything it
includes. Test 'layers', suite 'docs'.
"""
import graphlib
import os
import re
import sys

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.M)
CLASS = re.compile(r"^[ \t]*(?:class|struct)[ \t]+(\w+)\b[^;]*?\{", re.M)
# A method defined outside its class: at the start of a line, after a return type, `Class::name(` (or `~name`).
DEFINITION = re.compile(r"^(?!\s)(?:[\w:<>,*&]+[ \t]+)*?(\w+)::~?(\w+)[ \t]*\(", re.M)


def sources(src):
    """(folder, file name, path) of every C++ file under src/."""
    for dirpath, _, names in os.walk(src):
        folder = os.path.relpath(dirpath, src).replace(os.sep, "/")
        for name in sorted(names):
            if name.endswith((".hpp", ".cpp", ".h")):
                yield folder, name, os.path.join(dirpath, name)


def foreign_definitions(src):
    """Methods defined in another folder than their class's header: [(where, class, its folder)]."""
    declared = {}  # class -> the folders whose headers declare it
    texts = []
    for folder, name, path in sources(src):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        texts.append((folder, name, text))
        if name.endswith((".hpp", ".h")):
            for m in CLASS.finditer(text):
                declared.setdefault(m.group(1), set()).add(folder)
    out = []
    for folder, name, text in texts:
        if not name.endswith(".cpp"):
            continue
        for m in DEFINITION.finditer(text):
            homes = declared.get(m.group(1), set())
            # A name declared in one folder only (names used by several are not told apart here).
            if len(homes) == 1 and folder not in homes:
                line = text.count("\n", 0, m.start()) + 1
                out.append((f"src/{folder}/{name}:{line}", m.group(1), next(iter(homes))))
    return out


def include_graph(src):
    """folder -> {included folder: [(file, line), ...]}, for includes that name a file under src/."""
    graph = {}
    for dirpath, _, names in os.walk(src):
        folder = os.path.relpath(dirpath, src).replace(os.sep, "/")
        for name in sorted(names):
            if not name.endswith((".hpp", ".cpp", ".h")):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            edges = graph.setdefault(folder, {})
            for m in INCLUDE.finditer(text):
                target = m.group(1)
                if not os.path.isfile(os.path.join(src, target)):
                    continue
                to = os.path.dirname(target) or "."
                if to != folder:
                    line = text.count("\n", 0, m.start()) + 1
                    edges.setdefault(to, []).append((f"src/{folder}/{name}:{line}", target))
    return graph


def layers(graph):
    """Folders by height: layer 0 includes no other folder, layer n only folders of lower layers."""
    height = {}

    def h(node):
        if node not in height:
            height[node] = 1 + max((h(to) for to in graph.get(node, {})), default=-1)
        return height[node]

    for node in graph:
        h(node)
    out = {}
    for node, n in height.items():
        out.setdefault(n, []).append(node)
    return [sorted(out[n]) for n in sorted(out)]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = os.path.join(root, "src")
    if not os.path.isdir(src):
        sys.exit(f"check_layers.py: no src/ under '{root}'")
    graph = include_graph(src)
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        cycle = list(reversed(e.args[1]))  # graphlib lists it against the edges: a folder, then what includes it
        print("FAIL: the folders of src/ include each other: " + " -> ".join(cycle))
        for a, b in zip(cycle, cycle[1:]):
            for where, target in graph[a][b]:
                print(f"  {where}: #include \"{target}\"")
        print("A lower folder declares what it needs (a virtual on Model, a struct passed in) instead of including "
              "the folder above it.")
        return 1
    foreign = foreign_definitions(src)
    if foreign:
        print("FAIL: classes implemented by another folder than the one that declares them:")
        for where, cls, home in foreign:
            print(f"  {where}: defines a method of {cls} (declared in src/{home}/)")
        print("A folder above a class offers free functions over it instead (as checkpoint/state.hpp over the "
              "Accelerator).")
        return 1
    for n, folders in enumerate(layers(graph)):
        shown = [f"{f} (-> {', '.join(sorted(graph[f]))})" if graph[f] else f for f in folders]
        print(f"layer {n}: " + "; ".join(shown))
    print("ok: the folders of src/ form layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
