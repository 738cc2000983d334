#!/usr/bin/env python3
"""The folders of src/ are layers: no folder includes, directly or through others, a folder that includes it.

  check_layers.py [SOURCE_ROOT]     (default: the checkout this script lives in)

Reads every `#include "..."` of src/**/*.{hpp,cpp,h} that names a file under src/ (acc/... headers of
config/ and capi/, and generated headers, are outside the graph) and makes the graph folder -> folders it
includes; models/ and models/hf/ are two folders. A cycle fails, named with the include lines that close it.
Without a cycle it prints the folders layer by layer, each above everything it includes. Test 'layers',
suite 'docs'.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.M)


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


def tangles(graph):
    """The strongly connected components of more than one folder (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for to in graph.get(node, {}):
            if to not in index:
                visit(to)
                low[node] = min(low[node], low[to])
            elif to in on_stack:
                low[node] = min(low[node], index[to])
        if low[node] == index[node]:
            part = []
            while True:
                n = stack.pop()
                on_stack.discard(n)
                part.append(n)
                if n == node:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(out)


def cycle_in(graph, part):
    """A shortest cycle among the folders of `part`, as [a, b, ..., a]."""
    return min((cycle_through(graph, part, start) for start in part), key=len)


def cycle_through(graph, part, start):
    """A shortest cycle through `start` inside `part` (breadth first)."""
    came = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for to in sorted(graph.get(node, {})):
            if to == start:
                path = [node]
                while came[path[-1]] is not None:
                    path.append(came[path[-1]])
                return list(reversed(path)) + [start]
            if to in part and to not in came:
                came[to] = node
                queue.append(to)
    return [start]


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
    parts = tangles(graph)
    for part in parts:
        cycle = cycle_in(graph, part)
        print(f"FAIL: the folders {', '.join(part)} include each other, e.g. " + " -> ".join(cycle))
        for a, b in zip(cycle, cycle[1:]):
            for where, target in graph[a][b]:
                print(f"  {where}: #include \"{target}\"")
    if parts:
        print("A lower folder declares what it needs (a virtual on Model, a struct passed in) instead of including "
              "the folder above it.")
        return 1
    for n, folders in enumerate(layers(graph)):
        shown = [f"{f} (-> {', '.join(sorted(graph[f]))})" if graph[f] else f for f in folders]
        print(f"layer {n}: " + "; ".join(shown))
    print("ok: the folders of src/ form layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
