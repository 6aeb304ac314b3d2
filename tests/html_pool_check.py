#!/usr/bin/env python3
"""html_pool_check.py: the page's overview (--pool max|mean[:K] -o attn.html)
in a real browser (tests/browser.py).

usage: python3 tests/html_pool_check.py ./mha [--screenshot FILE.png]

Each case writes an overview page and works out the same blocks itself from
the run's JSON steps (a loop in the order cli/write/pool.c adds, so a mean is
the same bits), then checks the live page:

  - no JavaScript error, no request; the token view is not offered;
  - each head's every step is the blocks', bit for bit; for max, the cell
    each block names is the first of its largest;
  - the axes number the blocks from --rows' and --cols' first, with their
    first and last tokens;
  - hovering a block (a real mouse event) tells its queries and keys, its
    value and, for max, the cell that holds it and the --cell that works
    it, which --cell then does, to the same number; a block the mask
    covers says so; the legend says the rule and the block;
  - n = 2048, d_model 512, 8 heads: the page is under 5 MB and loads, a
    block of head 8 is the cell --cell works (--screenshot: that page).

Prints "N passed, N failed".
"""
import base64
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from browser import Browser, Tally, find_browser  # noqa: E402  (Chromium over the DevTools protocol)

MHA = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.abspath("mha")
SHOT = None
if len(sys.argv) > 2:
    if len(sys.argv) != 4 or sys.argv[2] != "--screenshot":
        sys.exit("usage: html_pool_check.py ./mha [--screenshot FILE.png]")
    SHOT = os.path.abspath(sys.argv[3])

check = Tally()


def mha(*argv):
    r = subprocess.run([MHA] + list(argv), capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("mha %s: %s" % (" ".join(argv), r.stderr))
    return r.stdout


def num(v):
    return float(v) if not isinstance(v, str) else float(v.replace("Infinity", "inf"))


def pool(m, mask, k, rule):
    """m's blocks of k by k as pool.c makes them: values, where each block's
    largest lies (max), cells the mask blocks"""
    rows, cols = len(m), len(m[0])
    out, at, blocked = [], [], []
    for bi in range(0, rows, k):
        for bj in range(0, cols, k):
            best, total, seen, where = None, 0.0, 0, 0
            for i in range(bi, min(rows, bi + k)):
                for j in range(bj, min(cols, bj + k)):
                    if mask is not None and mask[i][j] == -math.inf:
                        continue
                    v = m[i][j]
                    if not seen or (not math.isnan(best) and (v > best or math.isnan(v))):
                        best, where = v, (i - bi) * k + (j - bj)
                    total += v
                    seen += 1
            out.append(-math.inf if not seen else total / seen if rule == "mean" else best)
            at.append(where)
            blocked.append((min(rows, bi + k) - bi) * (min(cols, bj + k) - bj) - seen)
    return out, at, blocked


def page_array(b, expr):
    vals = b.js("Array.from(%s).map(function (v) { return isFinite(v) ? v : String(v); })" % expr)
    return [num(v) for v in vals]


def same_bits(a, c):
    return len(a) == len(c) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, c))


def hover(b, panel, i, j, n_kv):
    """a real mouse move onto block (i, j) (0-based) of panel; the box's head and text"""
    pos = b.js("""(function () {
        var c = document.querySelectorAll('section.panel canvas')[%d];
        c.scrollIntoView({block: 'center', inline: 'center'});
        var r = c.getBoundingClientRect(), cell = r.width / %d;
        return [r.left + (%d + 0.5) * cell, r.top + (%d + 0.5) * cell];
    })()""" % (panel, n_kv, j, i))
    b.mouse(pos[0], pos[1])
    return b.js("[document.getElementById('tip').hidden, document.getElementById('tip-head').textContent, "
                "document.getElementById('tip-text').textContent]")


def run_case(b, work, name, cmd, heads, rule, k, rows=None, cols=None, tokens=None):
    """cmd: the run; rows, cols: 1-based (first, last) of --rows and --cols"""
    page = os.path.join(work, name + ".html")
    cut = (["--rows", "%d:%d" % rows] if rows else []) + (["--cols", "%d:%d" % cols] if cols else [])
    mha(*(cmd + cut + ["--pool", "%s:%d" % (rule, k), "-o", page]))
    js = json.loads(mha(*(cmd + ["-p", "all", "-f", "json"])))
    b.page_url = "file://" + page
    b.open(page)
    check(not b.problems(), name + ": loads with no error and no request", b.problems())
    check(b.js("document.getElementById('view').parentNode.hidden"), name + ": no token view")
    legend = b.js("Array.from(document.querySelectorAll('#legend-svg text')).map(function (t) { "
                  "return t.textContent; })")
    want_legend = "a cell: the %s of a block of %d\u00d7%d" % ("largest" if rule == "max" else "mean", k, k)
    check(want_legend in legend, name + ": the legend says the rule and the block", legend)
    titles = b.js("Array.from(document.querySelectorAll('section.panel h2')).map(function (e) { "
                  "return e.textContent; })")
    check(len(titles) == heads and all(t.endswith(", %s of %d\u00d7%d blocks" % (rule, k, k)) for t in titles),
          name + ": a panel per head, titled with the blocks", titles)
    mask = [[num(v) for v in row] for row in js["mask"]] if "mask" in js else None
    r0, r1 = (rows[0] - 1, rows[1]) if rows else (0, len(js["heads"][0]["softmax"]))
    c0, c1 = (cols[0] - 1, cols[1]) if cols else (0, len(js["heads"][0]["softmax"][0]))
    n_q, n_kv = r1 - r0, c1 - c0
    bq, bkv = -(-n_q // k), -(-n_kv // k)
    # the axes: block numbers from the cut's first, the tokens at their ends
    def spans(first, n):
        return ["%d-%d" % (first + a + 1, first + min(a + k, n)) if min(a + k, n) > a + 1 else str(first + a + 1)
                for a in range(0, n, k)]
    labels = b.js("[Array.from(document.querySelector('section.panel .rows').children).map(function (e) { "
                  "return e.textContent; }), Array.from(document.querySelector('section.panel .cols').children)"
                  ".map(function (e) { return e.textContent; })]")
    if tokens:
        want = [[tokens[r0 + a] + "\u2013" + tokens[min(r0 + a + k, r1) - 1] for a in range(0, n_q, k)],
                [tokens[c0 + a] + "\u2013" + tokens[min(c0 + a + k, c1) - 1] for a in range(0, n_kv, k)]]
    else:
        want = [spans(r0, n_q), spans(c0, n_kv)]
    check(labels == want, name + ": the axes name the blocks", (labels, want))
    steps = [s for s in ("scores", "scaled", "softcapped", "masked", "softmax") if s in js["heads"][0]]
    offered = b.js("Array.from(document.getElementById('step').options).map(function (o) { return o.value; })")
    check(offered == steps, name + ": every step drawn is offered", (offered, steps))
    expect = {}
    for h in range(heads):
        for step in steps:
            m = [[num(v) for v in row[c0:c1]] for row in js["heads"][h][step][r0:r1]]
            mk = [row[c0:c1] for row in mask[r0:r1]] if mask is not None and step in ("masked", "softmax") \
                else None
            want_v, want_at, want_blocked = pool(m, mk, k, rule)
            expect[h, step] = (m, want_v, want_at, want_blocked)
            got = page_array(b, "mhaPage.seqs[0].heads[%d].%s" % (h, step))
            check(same_bits(got, want_v), name + ": head %d's %s blocks are the JSON steps', bit for bit"
                  % (h + 1, step), (got[:6], want_v[:6]))
            if rule == "max":
                got_at = b.js("Array.from(mhaPage.seqs[0].heads[%d].at.%s)" % (h, step))
                check(got_at == want_at, name + ": head %d's %s: each block names its first largest cell"
                      % (h + 1, step))
        if mask is not None:
            got_b = b.js("Array.from(mhaPage.seqs[0].heads[%d].blocked)" % h)
            check(got_b == expect[h, "softmax"][3], name + ": head %d's masked cells counted per block" % (h + 1))
    # hover: a block on the diagonal, a block past it, on the last head
    h = heads - 1
    fmt = "mhaPage.fmt(%r, 6)"
    for (i, j) in ((bq - 1, min(bkv - 1, bq - 1)), (0, bkv - 1)):
        hidden, head, body = hover(b, h, i, j, bkv)
        m, vals, at, blocked = expect[h, "softmax"]
        kb = i * bkv + j
        rows_in, cols_in = min(k, n_q - i * k), min(k, n_kv - j * k)
        q0, k0 = r0 + i * k + 1, c0 + j * k + 1
        if blocked[kb] == rows_in * cols_in:
            check(not hidden and "every cell is masked" in body, name + ": a block the mask covers says so",
                  body)
            continue
        v = b.js(fmt % vals[kb])
        check(not hidden and head.startswith("head %d, queries " % (h + 1)) and
              head.endswith(": %s of softmax = %s" % (rule, v)),
              name + ": the box's first line: the block and its value", head)
        check("a block of %d by %d cells" % (rows_in, cols_in) in body, name + ": the box gives the block's size",
              body)
        if rule == "max":
            qi, kj = q0 + at[kb] // k, k0 + at[kb] % k
            check("= %s, at query %d, key %d" % (v, qi, kj) in body and "--cell %d,%d" % (qi, kj) in body,
                  name + ": the box names the largest cell and its --cell", body)
            check(m[qi - 1 - r0][kj - 1 - c0] == vals[kb], name + ": that cell holds the block's value")
            worked = mha(*(cmd + ["--cell", "%d,%d" % (qi, kj)]))
            check(("weight %d,%d = " % (qi, kj)) in worked and worked.split("weight %d,%d = " % (qi, kj))[
                  h + 1 if heads > 1 else 1].split("\n")[0].endswith("= " + v),
                  name + ": --cell %d,%d works out the same %s" % (qi, kj, v), worked[-400:])
        else:
            want = "--rows %d:%d --cols %d:%d" % (q0, q0 + rows_in - 1, k0, k0 + cols_in - 1)
            check(("the mean softmax of its %d cells" % (rows_in * cols_in - blocked[kb])) in body and
                  want in body, name + ": the box gives the mean, its cells, and the --rows and --cols of them",
                  body)
    return page


def main():
    exe = find_browser()
    if not exe:
        print("html_pool_check.py: no chromium: install it (make check-browser does)")
        print("0 passed, 1 failed")
        return 1
    work = tempfile.mkdtemp(prefix="mha-pool.")
    rng = np.random.default_rng(17)

    def save(name, obj):
        p = os.path.join(work, name)
        with open(p, "w") as f:
            json.dump(obj, f)
        return p

    x = save("x.json", {"X": rng.normal(size=(150, 16)).round(3).tolist()})
    w = save("w.json", {k: (rng.normal(size=(16, 16)) / 2).round(3).tolist() for k in ("W_Q", "W_K", "W_V", "W_O")})
    toks = ["t%d" % (i + 1) for i in range(150)]
    profile = tempfile.mkdtemp(prefix="mha-chromium.")
    b = Browser(exe, profile, work)
    try:
        cmd = ["forward", "-x", x, "-w", w, "--heads", "2", "--causal", "--softcap", "4", "--tokens", ",".join(toks)]
        run_case(b, work, "max", cmd, 2, "max", 16, tokens=toks)
        cmd = ["forward", "-x", x, "-w", w, "--heads", "2", "--causal"]
        run_case(b, work, "mean-cut", cmd, 2, "mean", 20, rows=(31, 130), cols=(11, 90))
        run_case(b, work, "max-cut", cmd, 2, "max", 7, rows=(101, 150), cols=(1, 120))

        # a batch of three, keys padded: each sequence's own blocks, --sequence in the words
        xb3 = save("xb3.json", {"X": rng.normal(size=(3, 60, 8)).round(3).tolist()})
        cmd = ["forward", "-x", xb3, "--heads", "2", "--causal", "--kv-len", "60,30,45"]
        page = os.path.join(work, "batch.html")
        mha(*(cmd + ["--pool", "max:8", "-o", page]))
        b.page_url = "file://" + page
        b.open(page)
        js = json.loads(mha(*(cmd + ["--sequence", "2", "-p", "all", "-f", "json"])))
        mask = [[num(v) for v in row] for row in js["mask"]]
        soft = [[num(v) for v in row] for row in js["heads"][1]["softmax"]]
        want_v, want_at, _ = pool(soft, mask, 8, "max")
        got = page_array(b, "mhaPage.seqs[1].heads[1].softmax")
        check(not b.problems() and same_bits(got, want_v),
              "batch: sequence 2's blocks are its own --sequence 2 run's, bit for bit", b.problems())
        words = b.js("mhaPage.poolNarrate(1, 1, 6, 2).join('\\n')")
        qi, kj = 49 + want_at[6 * 8 + 2] // 8, 17 + want_at[6 * 8 + 2] % 8
        check("--sequence 2 --cell %d,%d" % (qi, kj) in words, "batch: a block's --cell names its sequence", words)
        words = b.js("mhaPage.poolNarrate(1, 1, 6, 5).join('\\n')")
        check("every cell is masked" in words, "batch: keys past --kv-len 30 are masked blocks", words)

        # the size the issue names: n = 2048, d_model 512, 8 heads
        xb, wb = os.path.join(work, "xb.npy"), os.path.join(work, "wb.npz")
        mha("init", "--n", "2048", "--d-model", "512", "--heads", "8", "-x", xb, "-w", wb)
        cmd = ["forward", "-x", xb, "-w", wb, "--heads", "8", "--causal"]
        page = os.path.join(work, "n2048.html")
        mha(*(cmd + ["--pool", "max", "-o", page]))
        size = os.path.getsize(page)
        b.page_url = "file://" + page
        t0 = time.time()
        b.open(page)
        load = time.time() - t0
        check(size < 5e6 and not b.problems(), "n2048-h8: the overview is %.2f MB, loaded in %.1f s"
              % (size / 1e6, load), b.problems())
        check(b.js("document.querySelectorAll('section.panel').length") == 8, "n2048-h8: 8 panels")
        hidden, head, body = hover(b, 7, 40, 20, 64)
        qi, kj = [int(v) for v in body.split(", at query ")[1].split("\n")[0].split(", key ")]
        v = head.rsplit(" = ", 1)[1]
        worked = mha(*(cmd + ["--cell", "%d,%d" % (qi, kj)]))
        line = [ln for ln in worked.split("\n") if ln.strip().startswith("weight %d,%d = " % (qi, kj))]
        check(1281 <= qi <= 1312 and 641 <= kj <= 672 and len(line) == 8 and line[7].endswith("= " + v),
              "n2048-h8: block 1281-1312 by 641-672 of head 8 is cell %d,%d, as --cell works it" % (qi, kj),
              (head, body, line))
        if SHOT:
            # head 1 alone, a block hovered: the window as a person sees it
            b.js("(function () { var s = document.getElementById('head'); s.value = '0'; "
                 "s.dispatchEvent(new Event('change')); })()")
            hover(b, 0, 44, 12, 64)
            view = b.js("[window.scrollX, window.scrollY, window.innerWidth, window.innerHeight]")
            shot = b.call("Page.captureScreenshot", {"format": "png", "clip": {
                "x": view[0], "y": view[1], "width": view[2], "height": view[3], "scale": 1}},
                session=True)["data"]
            with open(SHOT, "wb") as f:
                f.write(base64.b64decode(shot))
            check(os.path.getsize(SHOT) > 10000, "screenshot written to " + SHOT)
    finally:
        b.close()
        shutil.rmtree(profile, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (check.passed, check.failed))
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
