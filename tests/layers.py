#!/usr/bin/env python3
"""layers.py: cli/'s #include lines against its architecture
(docs/architecture.md).

    layers.py [CLI_DIR]       check (default: cli/ beside this file's tests/)
    layers.py --self-test     plant a back-reference and a circle in a copy
                              of cli/ and check that each is caught

The folders form a ladder, each allowed to include its own and those below:

    cmd > write > run > load > read > base

Every file of cli/ lives in one of them.  An include names a header by its
folder ("read/json.h"); the library's public header is "mha.h" (never its
internal ones) and the page's generated strings "html_page.h" (write/ only).
Beyond the ladder, the modules (a folder's NAME.c and NAME.h together) must
not include each other in a circle, within a folder or across.  Each
problem is one line: file, line, what is wrong; exit 1 when there is any.
"""
import os
import re
import shutil
import sys
import tempfile

LADDER = ["base", "read", "load", "run", "write", "cmd"]
RANK = {d: i for i, d in enumerate(LADDER)}
# headers outside cli/ a cli file may name, and the folders that may
OUTSIDE = {"mha.h": set(LADDER), "html_page.h": {"write"}}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def sources(root):
    """(folder, file name) of every file under root, and problems of place."""
    found, problems = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        top = rel.split(os.sep)[0]
        for name in sorted(filenames):
            if not name.endswith((".c", ".h")):
                continue
            if rel == "." or top not in RANK or os.sep in rel:
                problems.append("%s: a source outside the folders %s"
                                % (os.path.join(dirpath, name), ", ".join(LADDER)))
                continue
            found.append((top, name))
    return found, problems


def check(root):
    files, problems = sources(root)
    known = {"%s/%s" % f for f in files}
    edges = {}  # module -> {module: (file, line)}
    for folder, name in files:
        path = os.path.join(root, folder, name)
        module = "%s/%s" % (folder, os.path.splitext(name)[0])
        with open(path, encoding="utf-8") as f:
            for lineno, text in enumerate(f, 1):
                m = INCLUDE.match(text)
                if not m:
                    continue
                inc = m.group(1)
                where = "%s:%d" % (path, lineno)
                if inc in OUTSIDE:
                    if folder not in OUTSIDE[inc]:
                        problems.append('%s: "%s" is not for %s/' % (where, inc, folder))
                    continue
                parts = inc.split("/")
                if len(parts) != 2 or parts[0] not in RANK:
                    problems.append('%s: "%s" is not a header named by its folder '
                                    '(base/, read/, ... as "read/json.h")' % (where, inc))
                    continue
                if inc not in known:
                    problems.append('%s: "%s" does not exist' % (where, inc))
                    continue
                if RANK[parts[0]] > RANK[folder]:
                    problems.append('%s: %s/ includes "%s" above it (the ladder is %s)'
                                    % (where, folder, inc, " > ".join(reversed(LADDER))))
                target = "%s/%s" % (parts[0], os.path.splitext(parts[1])[0])
                if target != module:
                    edges.setdefault(module, {}).setdefault(target, where)
    problems += circles(edges)
    return problems


def circles(edges):
    """A line for each circle among the modules (one per strongly connected
    set of more than one), naming one include of it."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):  # Tarjan's, iteratively deep enough for a few hundred files
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                group.sort()
                inside = set(group)
                a = group[0]
                b = next(t for t in sorted(edges[a]) if t in inside)
                out.append("%s: a circle of includes among %s (%s includes %s)"
                           % (edges[a][b], ", ".join(group), a, b))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def self_test(root):
    """Each plant in a copy of root must be caught, and the copy as it is
    must pass."""
    plants = [
        ("base/msg.c", '#include "cmd/forward.h"\n', "above it"),
        ("read/json.c", '#include "../load/problem.h"\n', "not a header named"),
        ("base/text.c", '#include "kernel.h"\n', "not a header named"),
        ("read/csv.c", '#include "read/nowhere.h"\n', "does not exist"),
        ("base/msg.c", '#include "html_page.h"\n', "is not for base/"),
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "cli")
        shutil.copytree(root, copy)
        if check(copy):
            print("layers.py --self-test: the copy fails before any plant")
            return 1
        for rel, line, expect in plants:
            path = os.path.join(copy, rel)
            with open(path, encoding="utf-8") as f:
                original = f.read()
            with open(path, "w", encoding="utf-8") as f:
                f.write(line + original)
            found = check(copy)
            if not any(expect in p for p in found):
                print("layers.py --self-test: %s in %s not caught: %s" % (line.strip(), rel, found))
                failures += 1
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)
        # a circle within one folder: base/a.h includes base/b.h and back
        with open(os.path.join(copy, "base", "planted_a.h"), "w") as f:
            f.write('#include "base/planted_b.h"\n')
        with open(os.path.join(copy, "base", "planted_b.h"), "w") as f:
            f.write('#include "base/planted_a.h"\n')
        if not any("circle" in p for p in check(copy)):
            print("layers.py --self-test: a planted circle not caught")
            failures += 1
        # and a file outside the folders
        with open(os.path.join(copy, "loose.c"), "w") as f:
            f.write("\n")
        if not any("outside the folders" in p for p in check(copy)):
            print("layers.py --self-test: a file outside the folders not caught")
            failures += 1
    if not failures:
        print("layers.py --self-test: %d plants caught" % (len(plants) + 2))
    return 1 if failures else 0


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(os.path.dirname(here), "cli")
    if argv[1:2] == ["--self-test"]:
        return self_test(argv[2] if len(argv) > 2 else default)
    root = argv[1] if len(argv) > 1 else default
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print("layers.py: %d problem(s) with cli/'s includes (docs/architecture.md)" % len(problems))
        return 1
    files, _ = sources(root)
    print("layers.py: %d files in %d folders, includes down the ladder, no circle"
          % (len(files), len(LADDER)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
