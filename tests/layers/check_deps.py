#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The module graph of src/ against Documentation's dependency list.

Reads every module's `crate::` paths (and `super::` from the files directly under
src/), ignoring comments and strings, and checks that:
  - the graph has no cycle;
  - it is the graph that the design document's "Dependencies, file by file"
    paragraph lists, edge for edge, every module named ("→ none" for one that
    uses no other);
  - each module uses only modules listed before it in the source map's tables
    (the layers, in order), and none of the last table (the front-ends) uses
    another of it.
The macros of src/bindgen.rs, which every module may use, are not counted.

  tests/layers/check_deps.py [--graph]    --graph: print the graph found and stop
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The one place the design document's path is written.
DESIGN = os.path.join(ROOT, "Documentation", "dev", "design.rst")
SRC = os.path.join(ROOT, "src")
CRATE_ROOT = "gdrpeer_main"
# The modules every module may use without listing them.
IMPLICIT = {"bindgen"}


def strip(text):
    """`text` with comments, string and char literals blanked out."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not re.match(r"\w", text[i - 1:i]):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            out.append('""')
            i = n if end < 0 else end + 1 + len(m.group(1))
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def tree_heads(text, start):
    """The first names of the items of the `{...}` use tree opening at `start`."""
    heads, depth, item, i = [], 0, "", start
    while i < len(text):
        c = text[i]
        if c == "{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c == "}":
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and c == ",":
            heads.append(item)
            item = ""
        elif depth >= 1:
            item += c
        i += 1
    heads.append(item)
    names = []
    for h in heads:
        m = re.match(r"\s*(\w+)", h)
        if m:
            names.append(m.group(1))
    return names


def module_of(path):
    rel = os.path.relpath(path, SRC)
    return rel.split(os.sep)[0].removesuffix(".rs")


def graph():
    """{module: set of modules it uses}, for every module of the crate."""
    deps = {}
    for dirpath, _, files in os.walk(SRC):
        for f in sorted(files):
            # Bindgen's output (src/*_generated.rs) is included by the modules over it.
            if not f.endswith(".rs") or f.endswith("_generated.rs"):
                continue
            path = os.path.join(dirpath, f)
            mod = module_of(path)
            text = strip(open(path, encoding="utf-8").read())
            used = deps.setdefault(mod, set())
            prefixes = ["crate"]
            if os.path.dirname(path) == SRC:
                prefixes.append("super")
            for p in prefixes:
                for m in re.finditer(r"\b%s::(\{|\w+)" % p, text):
                    if m.group(1) == "{":
                        used.update(tree_heads(text, m.start(1)))
                    else:
                        used.add(m.group(1))
    for mod, used in deps.items():
        used.discard(mod)
        used -= IMPLICIT
        # Names in the crate root (its `module!` items) are the root's.
        deps[mod] = {u for u in used if u in deps or u == CRATE_ROOT}
    return deps


def documented():
    """The design document's dependency list and its layers: ({module: set}, [[modules]])."""
    text = open(DESIGN, encoding="utf-8").read()
    m = re.search(r"Dependencies, file by file:(.*?)(\n\n|$)", text, re.S)
    if not m:
        sys.exit("%s: no \"Dependencies, file by file:\" paragraph" % DESIGN)
    para = m.group(1)
    # Remarks in parentheses name no dependency.
    while True:
        new = re.sub(r"\([^()]*\)", "", para)
        if new == para:
            break
        para = new
    deps = {}
    for entry in para.split(";"):
        entry = entry.strip().rstrip(".")
        if not entry:
            continue
        if "→" not in entry:
            sys.exit("%s: dependency entry without an arrow: %r" % (DESIGN, entry))
        lhs, rhs = entry.split("→", 1)
        src = re.findall(r"``(\w+)``", lhs)
        dst = re.findall(r"``(\w+)``", rhs)
        if len(src) != 1 or not (dst or rhs.strip() == "none"):
            sys.exit("%s: cannot read dependency entry %r" % (DESIGN, entry))
        if src[0] in deps:
            sys.exit("%s: %s listed twice" % (DESIGN, src[0]))
        deps[src[0]] = set(dst)
    # The layers: the "src/<name>.rs" rows of the source map's tables, table by table, in
    # their order.
    source_map = text[: m.start()]
    layers = []
    for table in re.findall(r"\n(=+  =+\n.*?\n=+  =+)\n", source_map, re.S):
        rows = re.findall(r"^``src/(\w+)\.rs``", table, re.M)
        if rows:
            layers.append(rows)
    return deps, layers


def cycles(deps):
    """One cycle per strongly connected component of more than one module."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(deps):
        if v not in index:
            visit(v)
    return found


def main():
    deps = graph()
    if "--graph" in sys.argv[1:]:
        for mod in sorted(deps):
            print("%s -> %s" % (mod, ", ".join(sorted(deps[mod])) or "-"))
        return 0
    errors = []
    for comp in cycles(deps):
        errors.append("cycle among %s" % ", ".join(comp))
    doc, layers = documented()
    rel = os.path.relpath(DESIGN, ROOT)
    for mod in sorted(set(deps) | set(doc)):
        if mod == CRATE_ROOT:
            continue
        if mod not in deps:
            errors.append("%s lists %s, which is not a module of src/" % (rel, mod))
            continue
        if mod not in doc and mod not in IMPLICIT:
            errors.append("%s does not list %s (\"``%s`` → ...\" or \"→ none\")" % (rel, mod, mod))
            continue
        code, listed = deps[mod], doc.get(mod, set())
        for extra in sorted(code - listed):
            errors.append("%s uses %s, which %s does not list" % (mod, extra, rel))
        for gone in sorted(listed - code):
            errors.append("%s lists %s -> %s, which the code does not use" % (rel, mod, gone))
    order = {m: (n, i) for n, rows in enumerate(layers) for i, m in enumerate(rows)}
    last = len(layers) - 1
    for mod in sorted(deps):
        if mod == CRATE_ROOT or mod in IMPLICIT:
            continue
        if mod not in order:
            errors.append("%s is in no table of %s's source map" % (mod, rel))
            continue
        for dep in sorted(deps[mod]):
            if dep == CRATE_ROOT:
                errors.append("%s uses the crate root" % mod)
            elif dep not in order:
                continue
            elif order[dep][0] == order[mod][0] == last:
                errors.append("front-end %s uses front-end %s" % (mod, dep))
            elif order[dep] > order[mod]:
                errors.append("%s uses %s, listed after it in %s's source map"
                              % (mod, dep, rel))
    for e in errors:
        print("check_deps: %s" % e)
    if errors:
        return 1
    print("check_deps: %d modules, %d dependencies, as %s lists them; no cycle"
          % (len(deps) - 1, sum(len(d) for m, d in deps.items() if m != CRATE_ROOT), rel))
    return 0


if __name__ == "__main__":
    sys.exit(main())
