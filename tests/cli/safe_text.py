#!/usr/bin/env python3
"""safe_text.py: checks that what mha wrote can go to a terminal as it is.

    safe_text.py FILE...     (- for standard input)

Each file must be valid UTF-8 and hold no control character but the line
feed: no other C0 control (ESC, BEL, CR, tab, ...), no DEL, no C1 control
(U+0080 to U+009F), no bidirectional override or isolate.  Prints
"FILE: safe, N lines" or each offending character with its line, and exits
1 if any file is not safe.  A JSON file is also parsed (strictly: the bytes
as UTF-8) and its "tokens" printed as Python escapes them.
"""
import json
import sys

BIDI = set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A))


def check(name, data):
    bad = 0
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        print(f"{name}: not UTF-8: {e}")
        return 1
    for n, line in enumerate(text.split("\n"), 1):
        for ch in line:
            c = ord(ch)
            if c < 0x20 or 0x7F <= c <= 0x9F or c in BIDI:
                print(f"{name}: line {n}: U+{c:04X}")
                bad += 1
    if not bad:
        print(f"{name}: safe, {text.count(chr(10))} lines")
    if name.endswith(".json"):
        doc = json.loads(text)
        for key in ("tokens", "kv_tokens"):
            if key in doc:
                print(f"{name}: {key}: {ascii(doc[key])}")
    return 1 if bad else 0


def main():
    rc = 0
    for name in sys.argv[1:]:
        if name == "-":
            rc |= check("<stdin>", sys.stdin.buffer.read())
        else:
            with open(name, "rb") as f:
                rc |= check(name, f.read())
    return rc


if __name__ == "__main__":
    sys.exit(main())
