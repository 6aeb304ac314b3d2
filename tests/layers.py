#!/usr/bin/env python3
"""layers.py: cli/'s, engine/'s and lib/'s #include lines and calls
against their architecture (docs/architecture.md).

    layers.py [ROOT]          check the three trees (default: cli/, engine/
                              and lib/ beside this file's tests/), or the one
                              ROOT names
    layers.py --self-test     plant, in a copy of each tree, an include
                              above the file's folder, a call above it, a
                              circle of includes and a circle of calls, and
                              check that each is caught

The trees stand on each other, cli/ (the program) on engine/ (reading,
resolving, running, comparing: libmhe) on lib/ (the arithmetic: libmha).
Each tree's folders form a ladder, each allowed to include and to call its
own and those below:

    cli:     cmd > write > base           (and any of engine/'s headers)
    engine:  api > compare > run > load > read > util
    lib:     api > latent > core > steps > kernels > base

Every file lives in one of them (lib/mha.h and engine/mhe.h, the public
headers, at the top of their trees).  An include names a header by its
folder ("read/json.h", "kernels/kernel.h"); the libraries' public headers
are "mha.h" and "mhe.h" (nothing names lib/'s internal ones outside lib/;
engine/ names nothing of cli/, and a function of cli/ called from engine/
would not link: tests/engine_check.sh builds a program from engine/ and
lib/ alone) and the page's generated strings "html_page.h" (write/ only).  Beyond the ladder, no circle: the modules (a folder's
NAME.c and NAME.h together) must not include each other in a circle, and
the files must not call each other in one (a function defined in one file
and called from another, both ways, or round a longer loop), within a
folder or across.  Each problem is one line: file, line, what is wrong;
exit 1 when there is any.
"""
import os
import re
import shutil
import sys
import tempfile

ENGINE_LADDER = ["util", "read", "load", "run", "compare", "api"]
TREES = {
    "cli": {"ladder": ["base", "write", "cmd"],
            "outside": {"mha.h": None, "mhe.h": None, "html_page.h": {"write"}}, "top": set(),
            "below": ("engine", ENGINE_LADDER)},
    "engine": {"ladder": ENGINE_LADDER,
               "outside": {"mha.h": None, "mhe.h": None}, "top": {"mhe.h"}},
    "lib": {"ladder": ["base", "kernels", "steps", "core", "latent", "api"],
            "outside": {"mha.h": None}, "top": {"mha.h"}},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
# a function defined at the left margin: its type, its name (or BW(name), the
# backward's per element type), its parameters, then its body
DEFINITION = re.compile(r'^(?!static\b)(?![ \t#])[A-Za-z_][\w \t\*]*?\b(BW\(\w+\)|\w+)\s*\([^;{}]*\)\s*\{',
                        re.M)
# any function defined at the left margin, a file's own (static) too
ANY_DEFINITION = re.compile(r'^(?![ \t#])[A-Za-z_][\w \t\*]*?\b(BW\(\w+\)|\w+)\s*\([^;{}]*\)\s*\{',
                            re.M)
CALL = re.compile(r'\b(BW\(\w+\)|\w+)\s*\(')


def kind(root):
    """cli or lib, by the folder's name"""
    name = os.path.basename(os.path.normpath(root))
    return TREES[name] if name in TREES else TREES["cli"]


def sources(root, tree):
    """(folder, file name) of every file under root, and problems of place."""
    found, problems = [], []
    rank = {d: i for i, d in enumerate(tree["ladder"])}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        top = rel.split(os.sep)[0]
        for name in sorted(filenames):
            if not name.endswith((".c", ".h")):
                continue
            if rel == "." and name in tree["top"]:
                continue
            if rel == "." or top not in rank or os.sep in rel:
                problems.append("%s: a source outside the folders %s"
                                % (os.path.join(dirpath, name), ", ".join(tree["ladder"])))
                continue
            found.append((top, name))
    return found, problems


def code_of(text):
    """text without its comments and string and character literals (a
    function named in a help string is no call)"""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", text)


def names_of(name):
    """the names a definition or a call stands for (BW(x): both types')"""
    m = re.match(r"BW\((\w+)\)", name)
    if m:
        return ["mha_bw64_" + m.group(1), "mha_bw32_" + m.group(1)]
    return [name]


def calls(root, files, tree):
    """Problems of the files' calls: one to a function a folder above
    defines, and circles of calls among the files."""
    rank = {d: i for i, d in enumerate(tree["ladder"])}
    code, defined, problems = {}, {}, []
    for folder, name in files:
        if not name.endswith(".c"):
            continue
        f = "%s/%s" % (folder, name)
        with open(os.path.join(root, folder, name), encoding="utf-8") as fh:
            code[f] = code_of(fh.read())
        for m in DEFINITION.finditer(code[f]):
            for n in names_of(m.group(1)):
                if n not in ("if", "for", "while", "switch", "return", "sizeof"):
                    defined.setdefault(n, f)
    edges = {}
    for f, text in sorted(code.items()):
        # a name the file defines itself (a static of the same name) is its own
        own = {n for m in ANY_DEFINITION.finditer(text) for n in names_of(m.group(1))}
        for m in CALL.finditer(text):
            for n in names_of(m.group(1)):
                g = defined.get(n)
                if not g or g == f or n in own:
                    continue
                line = text.count("\n", 0, m.start()) + 1
                where = "%s:%d" % (os.path.join(root, f), line)
                if rank[g.split("/")[0]] > rank[f.split("/")[0]]:
                    problems.append("%s: %s/ calls %s() of %s, above it (the ladder is %s)"
                                    % (where, f.split("/")[0], n, g,
                                       " > ".join(reversed(tree["ladder"]))))
                edges.setdefault(f, {}).setdefault(g, where)
    return problems + circles(edges, "calls")


def check(root):
    tree = kind(root)
    ladder = tree["ladder"]
    rank = {d: i for i, d in enumerate(ladder)}
    files, problems = sources(root, tree)
    known = {"%s/%s" % f for f in files}
    below = set()
    if "below" in tree:  # the tree it stands on: any of its headers, by folder
        other = os.path.join(os.path.dirname(os.path.normpath(root)), tree["below"][0])
        below = {"%s/%s" % f for f in sources(other, TREES[tree["below"][0]])[0]}
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
                if inc in tree["outside"]:
                    allowed = tree["outside"][inc]
                    if allowed is not None and folder not in allowed:
                        problems.append('%s: "%s" is not for %s/' % (where, inc, folder))
                    continue
                parts = inc.split("/")
                if inc in below:
                    continue
                if len(parts) != 2 or parts[0] not in rank:
                    problems.append('%s: "%s" is not a header named by its folder '
                                    '(%s/, %s/, ... as "%s/NAME.h")'
                                    % (where, inc, ladder[0], ladder[1], ladder[1]))
                    continue
                if inc not in known:
                    problems.append('%s: "%s" does not exist' % (where, inc))
                    continue
                if rank[parts[0]] > rank[folder]:
                    problems.append('%s: %s/ includes "%s" above it (the ladder is %s)'
                                    % (where, folder, inc, " > ".join(reversed(ladder))))
                target = "%s/%s" % (parts[0], os.path.splitext(parts[1])[0])
                if target != module:
                    edges.setdefault(module, {}).setdefault(target, where)
    problems += circles(edges, "includes")
    problems += calls(root, files, tree)
    return problems


def circles(edges, what):
    """A line for each circle (one per strongly connected set of more than
    one), naming one edge of it."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):  # Tarjan's, deep enough for a few hundred files
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
                out.append("%s: a circle of %s among %s (%s %s %s)"
                           % (edges[a][b], what, ", ".join(group), a, what, b))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


# what each self-test plants: (file, a line put first, the words its problem has)
PLANTS = {
    "cli": [("base/msg.c", '#include "cmd/forward.h"\n', "above it"),
            ("write/write.c", '#include "../cmd/attention.h"\n', "not a header named"),
            ("base/outfile.c", '#include "kernel.h"\n', "not a header named"),
            ("write/svg.c", '#include "write/nowhere.h"\n', "does not exist"),
            ("base/msg.c", '#include "html_page.h"\n', "is not for base/"),
            ("base/msg.c", "void mha_planted_up(void) { cmd_forward(0, 0); }\n",
             "calls cmd_forward() of cmd/forward.c, above it")],
    "engine": [("util/msg.c", '#include "load/problem.h"\n', "above it"),
               ("read/json.c", '#include "../load/problem.h"\n', "not a header named"),
               ("load/load.c", '#include "base/cli.h"\n', "not a header named"),
               ("read/csv.c", '#include "read/nowhere.h"\n', "does not exist"),
               ("read/csv.c", '#include "html_page.h"\n', "not a header named"),
               ("util/text.c", "void mha_planted_up(void) { problem_load(0, 0); }\n",
                "calls problem_load() of load/load.c, above it")],
    "lib": [("base/rules.c", '#include "core/core.h"\n', "above it"),
            ("base/rules.c", '#include "kernel.h"\n', "not a header named"),
            ("kernels/pages.c", '#include "core/nowhere.h"\n', "does not exist"),
            ("steps/norm.c", "void mha_planted_up(void) { mha_core_memory(0, 0, 0, 0); }\n",
             "calls mha_core_memory() of core/forward.c, above it")],
}


def self_test_tree(root, name):
    plants = PLANTS[name]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, name)
        shutil.copytree(root, copy)
        tree = TREES[name]
        if "below" in tree:  # the tree it stands on, beside it as in the checkout
            shutil.copytree(os.path.join(os.path.dirname(os.path.normpath(root)),
                                         tree["below"][0]),
                            os.path.join(tmp, tree["below"][0]))
        low = tree["ladder"][0]
        if check(copy):
            print("layers.py --self-test: the copy of %s/ fails before any plant: %s"
                  % (name, check(copy)))
            return 1
        for rel, line, expect in plants:
            path = os.path.join(copy, rel)
            with open(path, encoding="utf-8") as f:
                original = f.read()
            with open(path, "w", encoding="utf-8") as f:
                f.write(line + original)
            found = check(copy)
            if not any(expect in p for p in found):
                print("layers.py --self-test: %s in %s/%s not caught: %s"
                      % (line.strip(), name, rel, found))
                failures += 1
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)
        # a circle of includes within one folder: base/a.h includes base/b.h and back
        with open(os.path.join(copy, low, "planted_a.h"), "w") as f:
            f.write('#include "%s/planted_b.h"\n' % low)
        with open(os.path.join(copy, low, "planted_b.h"), "w") as f:
            f.write('#include "%s/planted_a.h"\n' % low)
        if not any("circle of includes" in p for p in check(copy)):
            print("layers.py --self-test: a planted circle of includes in %s/ not caught" % name)
            failures += 1
        for f in ("planted_a.h", "planted_b.h"):
            os.unlink(os.path.join(copy, low, f))
        # a circle of calls between two files of one folder
        with open(os.path.join(copy, low, "planted_a.c"), "w") as f:
            f.write("void mha_planted_b(void);\nvoid mha_planted_a(void)\n{\n"
                    "\tmha_planted_b();\n}\n")
        with open(os.path.join(copy, low, "planted_b.c"), "w") as f:
            f.write("void mha_planted_a(void);\nvoid mha_planted_b(void)\n{\n"
                    "\tmha_planted_a();\n}\n")
        if not any("circle of calls" in p for p in check(copy)):
            print("layers.py --self-test: a planted circle of calls in %s/ not caught" % name)
            failures += 1
        for f in ("planted_a.c", "planted_b.c"):
            os.unlink(os.path.join(copy, low, f))
        # and a file outside the folders
        with open(os.path.join(copy, "loose.c"), "w") as f:
            f.write("\n")
        if not any("outside the folders" in p for p in check(copy)):
            print("layers.py --self-test: a file outside the folders of %s/ not caught" % name)
            failures += 1
    if not failures:
        print("layers.py --self-test: %d plants caught in %s/" % (len(plants) + 3, name))
    return failures


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.path.dirname(here)
    if argv[1:2] == ["--self-test"]:
        roots = [argv[2]] if len(argv) > 2 else [os.path.join(top, t) for t in TREES]
        return 1 if sum(self_test_tree(r, os.path.basename(os.path.normpath(r)))
                        for r in roots) else 0
    roots = [argv[1]] if len(argv) > 1 else [os.path.join(top, t) for t in TREES]
    rc = 0
    for root in roots:
        problems = check(root)
        name = os.path.basename(os.path.normpath(root))
        for p in problems:
            print(p)
        if problems:
            print("layers.py: %d problem(s) with %s/'s includes and calls "
                  "(docs/architecture.md)" % (len(problems), name))
            rc = 1
            continue
        files, _ = sources(root, kind(root))
        print("layers.py: %s/: %d files in %d folders, includes and calls down the ladder, "
              "no circle" % (name, len(files), len(kind(root)["ladder"])))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
