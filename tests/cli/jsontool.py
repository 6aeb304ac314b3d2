"""jsontool.py: look at mha's JSON output from the CLI test cases.

  jsontool.py summary [FILE]          check FILE (default: standard input) is
                                      strict RFC 8259 JSON, then print one line
                                      per matrix, "PATH RxC", and one per entry
                                      that is not a number, 'PATH = "-inf"';
                                      the "meta" object on one line
  jsontool.py same FILE KEY FILE KEY  are the two matrices equal, bit for bit?

Strict means: no NaN, Infinity or -Infinity tokens (Python's json module
accepts them unless told not to), no key twice in one object, one value
and nothing after it.  A failed check prints why and exits 1.
"""
import json
import sys


def reject_constant(name):
    raise ValueError("not RFC 8259 JSON: the token %s" % name)


def unique_keys(pairs):
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError("the key %r appears twice in one object" % key)
        seen.add(key)
    return dict(pairs)


def load(path):
    if path == "-":
        text = sys.stdin.read()
        path = "<stdin>"
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    try:
        return json.loads(text, parse_constant=reject_constant,
                          object_pairs_hook=unique_keys)
    except ValueError as e:
        sys.exit("jsontool: %s: %s" % (path, e))


def shape(v):
    dims = []
    while isinstance(v, list):
        dims.append(len(v))
        v = v[0] if v else None
    return dims


def walk(v, path, out):
    if path == "meta":
        out.append("meta %s" % json.dumps(v))
    elif isinstance(v, dict):
        for k, x in v.items():
            walk(x, "%s.%s" % (path, k) if path else k, out)
    elif isinstance(v, list) and v and isinstance(v[0], list) and not isinstance(v[0][0], list):
        out.append("%s %s" % (path, "x".join(map(str, shape(v)))))
        for i, row in enumerate(v):
            for j, x in enumerate(row):
                if not isinstance(x, (int, float)) or isinstance(x, bool):
                    out.append("%s[%d][%d] = %s" % (path, i, j, json.dumps(x)))
    elif isinstance(v, list) and v and isinstance(v[0], list):
        out.append("%s %s" % (path, "x".join(map(str, shape(v)))))
        for h, plane in enumerate(v):
            for i, row in enumerate(plane):
                for j, x in enumerate(row):
                    if not isinstance(x, (int, float)) or isinstance(x, bool):
                        out.append("%s[%d][%d][%d] = %s" % (path, h, i, j, json.dumps(x)))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            walk(x, "%s[%d]" % (path, i), out)
    else:
        out.append("%s = %s" % (path, json.dumps(v)))


def main(argv):
    if len(argv) >= 1 and argv[0] == "summary" and len(argv) <= 2:
        out = []
        walk(load(argv[1] if len(argv) == 2 else "-"), "", out)
        print("\n".join(out))
        return 0
    if len(argv) == 5 and argv[0] == "same":
        a, b = load(argv[1])[argv[2]], load(argv[3])[argv[4]]
        if shape(a) != shape(b):
            print("different shapes: %s and %s" % (shape(a), shape(b)))
            return 1
        n = 0
        for i, (ra, rb) in enumerate(zip(a, b)):
            for j, (x, y) in enumerate(zip(ra, rb)):
                if float(x).hex() != float(y).hex():
                    print("[%d][%d] differs: %r and %r" % (i, j, x, y))
                    return 1
                n += 1
        print("the same %d numbers" % n)
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
