#!/usr/bin/env python3
"""html_check.py: -o attn.html (cli/write/html.c, cli/write/html/page.*) in a real browser.

usage: python3 tests/html_check.py ./mha [--screenshot FILE.png] [--keep DIR]

Each case writes a page with mha, checks the file (no URL of any kind, the
data escaped), then opens it from a file:// URL in headless Chromium, driven
over the DevTools protocol on a pipe (--remote-debugging-pipe: no port, no
npm), and checks the live page:

  - it runs without a JavaScript error and asks for nothing but itself;
  - the DOM holds a panel per head and every query and key label, as text;
    a token made of markup (</script><img ...>) stays text: no element;
  - hovering a cell (a real mouse event at its place) and moving there with
    the arrow keys show a box whose text is, line for line, what
    'mha forward --explain --cell I,J' prints for that head;
  - the token view: a query focused, the right arrow goes to its strongest
    key and the box tells that cell;
  - the steps the page re-derives (scaled, masked) are bit for bit the
    JSON output's; every step offered is one --print names;
  - Save SVG makes a download of well-formed SVG with the labels as text;
    Save PNG a PNG;
  - a batch has a sequence selector; --dtype f32 says the page is float64's.
  - the n = 200, 8-head page's size and load time are printed and bounded.

--screenshot FILE: the classroom-size page, a cell hovered, as a PNG (the
docs/tutorial.md's picture: docs/html-page.png).  Prints "N passed, N failed".
"""
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from browser import Browser, Tally, find_browser  # noqa: E402  (Chromium over the DevTools protocol)

MHA = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.abspath("mha")
TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOT = None
KEEP = None
args = sys.argv[2:]
while args:
    if args[0] == "--screenshot" and len(args) > 1:
        SHOT = os.path.abspath(args[1])
        args = args[2:]
    elif args[0] == "--keep" and len(args) > 1:
        KEEP = os.path.abspath(args[1])
        args = args[2:]
    else:
        sys.exit("usage: html_check.py ./mha [--screenshot FILE.png] [--keep DIR]")

check = Tally()


def mha(*argv, ok=True):
    r = subprocess.run([MHA] + list(argv), capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise SystemExit("mha %s: %s" % (" ".join(argv), r.stderr))
    return r


# ---- what the page must say -------------------------------------------------

def explain_cell(cmd, i, j, head):
    """'mha forward --explain --cell i,j' (1-based): head's worked lines
    (with --rope, the rotation's lines give way to the page's one note)"""
    out = mha(*(cmd + ["--explain", "--cell", "%d,%d" % (i, j)])).stdout.split("\n")
    for k, line in enumerate(out):
        if line.startswith("  Query ") and line.endswith(", head %d, by hand:" % head):
            lines = [line]
            for more in out[k + 1:]:
                if not more.startswith("    "):
                    break
                lines.append(more)
            norm = "--q-norm" in cmd or "--norm" in cmd
            # latent attention: the page gives the same two parts of the score
            if ("--rope" in cmd or norm) and "--kv-b-proj" not in cmd:
                at = next(n for n, l in enumerate(lines) if l.startswith("    score"))
                lines[1:at] = (["    (q and k normalised first, q_norm and k_norm: --explain "
                                "shows the norm)"] if norm else []) + \
                    (["    (q and k after the rotary embedding: --explain --cell shows the "
                      "rotation)"] if "--rope" in cmd else [])
            return "\n".join(lines)
    raise SystemExit("no worked cell in --explain's output")


def url_free(text):
    """what in the page could reference a URL"""
    bad = []
    for pat in (r"http:", r"https:", r"@import", r"(?<![a-z])url\(", r"(src|href|action|srcset)\s*=\s*[\"']?\s*//",
                r"<link", r"<img", r"<iframe", r"<object", r"<embed", r"\bimport\s*\(", r"fetch\(",
                r"XMLHttpRequest", r"WebSocket"):
        if re.search(pat, text, re.I):
            bad.append(pat)
    return bad


def hover_cell(b, panel, i, j):
    """a real mouse move onto cell (i, j) (0-based) of panel (0-based); the box's text"""
    pos = b.js("""(function () {
        var c = document.querySelectorAll('section.panel canvas')[%d];
        c.scrollIntoView({block: 'center', inline: 'center'});
        var r = c.getBoundingClientRect(), cell = r.width / %d, x = r.left + (%d + 0.5) * cell,
            y = r.top + (%d + 0.5) * cell;
        /* a tall panel: the cell itself into the middle of the window */
        window.scrollBy(x < 5 || x > innerWidth - 5 ? x - innerWidth / 2 : 0,
                        y < 5 || y > innerHeight - 5 ? y - innerHeight / 2 : 0);
        r = c.getBoundingClientRect();
        return [r.left + (%d + 0.5) * cell, r.top + (%d + 0.5) * cell];
    })()""" % (panel, NKV[0], j, i, j, i))
    b.mouse(pos[0], pos[1])
    return b.js("[document.getElementById('tip').hidden, document.getElementById('tip-head').textContent, "
                "document.getElementById('tip-text').textContent]")


NKV = [0]


def run_case(b, work, name, cmd, heads, tokens, kv_tokens=None, cells=(), batch=0, f32=False,
             steps=None, json_cmd=None, first=None):
    page = os.path.join(work, name + ".html")
    mha(*(cmd + ["-o", page] + (["--dtype", "f32"] if f32 else []) + (["-p", first] if first else [])))
    text = open(page, encoding="utf-8").read()
    check(not url_free(text), name + ": the file references no URL", url_free(text))
    data = text.split('<script id="mha-data" type="application/json">', 1)[1].split("</script>", 1)[0]
    check("<" not in data and "\u2028" not in data and "\u2029" not in data,
          name + ": the data holds no '<', U+2028 or U+2029")
    meta = json.loads(data)
    NKV[0] = meta["n_kv"]
    b.page_url = "file://" + page
    b.open(page)
    check(not b.problems(), name + ": loads with no error and no request", b.problems())
    got = b.js("Array.from(document.querySelectorAll('section.panel')).map(function (s) { "
               "return s.getAttribute('data-head') + ':' + s.querySelector('h2').textContent; })")
    check(len(got) == heads and all(g.startswith("%d:head %d" % (h + 1, h + 1)) for h, g in enumerate(got)),
          name + ": a panel per head, each titled", got)
    rows = b.js("Array.from(document.querySelector('section.panel .rows').children).map(function (e) { "
                "return e.textContent; })")
    cols = b.js("Array.from(document.querySelector('section.panel .cols').children).map(function (e) { "
                "return e.textContent; })")
    want_k = kv_tokens if kv_tokens is not None else tokens
    check(rows == tokens and cols == want_k, name + ": every query and key label is in the DOM as text",
          (rows, cols))
    check(b.js("document.querySelectorAll('img, iframe, object, embed, link').length") == 0 and
          b.js("document.querySelectorAll('script').length") == 2,
          name + ": no element came from the data")
    if steps is not None:
        offered = b.js("Array.from(document.getElementById('step').options).map(function (o) { "
                       "return o.value; })")
        check(offered == steps, name + ": the steps offered", offered)
    # hover: the box tells the cell as --explain --cell does
    for (i, j, h) in cells:
        hidden, head, body = hover_cell(b, h - 1, i - 1, j - 1)
        want = explain_cell(cmd, i, j, h)
        check(not hidden and body == want, name + ": hovering cell %d,%d of head %d shows --explain --cell's lines"
              % (i, j, h), "page:\n%s\nexplain:\n%s" % (body, want))
        check(head.startswith("head %d, query %d" % (h, i)), name + ": the box's first line names the cell", head)
    # the derived steps are the library's, bit for bit
    if json_cmd is not None:
        js = json.loads(mha(*(json_cmd + ["-f", "json"])).stdout)

        def as_float(v):
            return float(v) if not isinstance(v, str) else float(v.replace("inf", "inf"))
        for h in range(heads):
            for step in ("scaled", "masked", "scores", "softmax"):
                src = js["heads"][h] if "heads" in js else js
                if step not in src:
                    continue
                want = np.array([[as_float(v) for v in row] for row in src[step]]).ravel()
                page_v = b.js("Array.from(mhaPage.seqs[0].heads[%d].%s).map(function (v) { "
                              "return isFinite(v) ? v : String(v); })" % (h, step))
                page_v = np.array([float(v.replace("Infinity", "inf")) if isinstance(v, str) else v
                                   for v in page_v])
                same = want.shape == page_v.shape and all(
                    (a == c) or (np.isnan(a) and np.isnan(c)) for a, c in zip(want, page_v))
                check(same, name + ": head %d's %s in the page is the JSON output's, bit for bit"
                      % (h + 1, step))
    if batch:
        opts = b.js("Array.from(document.getElementById('sequence').options).map(function (o) { "
                    "return o.textContent; })")
        check(opts == ["sequence %d of %d" % (k + 1, batch) for k in range(batch)] and
              not b.js("document.getElementById('sequence-box').hidden"),
              name + ": a sequence selector", opts)
        b.js("(function () { var s = document.getElementById('sequence'); s.value = '%d'; "
             "s.dispatchEvent(new Event('change')); })()" % (batch - 1))
        i, j, h = cells[0]
        hidden, head, body = hover_cell(b, h - 1, i - 1, j - 1)
        seq = ["--sequence", str(batch)]
        want = explain_cell(cmd + seq, i, j, h)
        check(body == want, name + ": the last sequence's cell, as --sequence %d --explain --cell" % batch,
              "page:\n%s\nexplain:\n%s" % (body, want))
    check(b.js("!document.getElementById('note').hidden") == f32,
          name + ": the page says when --dtype f32's steps are float64's")
    return page


def keyboard(b, name, cmd):
    """tab to the first heatmap, move with the arrows; then the token view"""
    b.js("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
    seen = []
    for _ in range(40):
        b.key("Tab")
        tag = b.js("document.activeElement.tagName")
        seen.append(tag)
        if tag == "CANVAS":
            break
    check(seen[-1] == "CANVAS", name + ": Tab reaches the heatmap", seen)
    # focus shows the cell the cursor is on (1,1, or the one last hovered)
    head = b.js("document.getElementById('tip-head').textContent")
    i0, j0 = int(re.search(r"query (\d+)", head).group(1)), int(re.search(r"key (\d+)", head).group(1))
    i1, j1 = (i0 + 1, j0 + 1) if i0 < NQ_OF[name] and j0 < NKV[0] else (i0 - 1, j0 - 1)
    b.key("ArrowRight" if j1 > j0 else "ArrowLeft")
    b.key("ArrowDown" if i1 > i0 else "ArrowUp")
    body = b.js("document.getElementById('tip').hidden ? '' : document.getElementById('tip-text').textContent")
    want = explain_cell(cmd, i1, j1, 1)
    check(body == want, name + ": arrow keys move from cell %d,%d to %d,%d and the box tells it"
          % (i0, j0, i1, j1), "page:\n%s\nexplain:\n%s" % (body, want))
    outline = b.js("getComputedStyle(document.activeElement, ':focus-visible').outlineStyle + ' ' + "
                   "getComputedStyle(document.querySelector('.cursor')).borderStyle")
    check("solid" in outline, name + ": the focus and the cell cursor are visible", outline)
    # token view: query 2 focused, right arrow to its strongest key
    b.js("(function () { var v = document.getElementById('view'); v.value = 'tokens'; "
         "v.dispatchEvent(new Event('change')); })()")
    qs = b.js("document.querySelectorAll('section.panel .tokcol.q .tok').length")
    check(qs > 0, name + ": the token view lists the queries")
    b.js("document.querySelectorAll('section.panel .tokcol.q .tok')[1].focus()")
    b.key("ArrowRight")
    j = b.js("Array.prototype.indexOf.call(document.querySelectorAll('section.panel')[0]"
             ".querySelectorAll('.tokcol.k .tok'), document.activeElement)")
    w = b.js("Array.from(mhaPage.seqs[0].heads[0].softmax.slice(mhaPage.seqs[0].heads[0].softmax.length"
             " / %d, 2 * mhaPage.seqs[0].heads[0].softmax.length / %d))" % (NQ_OF[name], NQ_OF[name]))
    body = b.js("document.getElementById('tip-text').textContent")
    want = explain_cell(cmd, 2, j + 1, 1)
    check(j == int(np.argmax(w)) and body == want,
          name + ": the token view's right arrow goes to the strongest key, and the box tells the line",
          "key %d, weights %s\npage:\n%s\nexplain:\n%s" % (j, w, body, want))
    # a line hovered with the mouse
    pos = b.js("""(function () {
        var c = document.querySelectorAll('section.panel canvas')[0], r = c.getBoundingClientRect(),
            rowH = r.height / Math.max(mhaPage.seqs[0].heads[0].softmax.length / %d, %d);
        return [r.left + r.width / 2, r.top + (1.5 * rowH + (%d + 0.5) * rowH) / 2];
    })()""" % (NKV[0], NKV[0], j))
    b.mouse(pos[0], pos[1])
    body = b.js("document.getElementById('tip').hidden ? '' : document.getElementById('tip-text').textContent")
    check(body == want, name + ": hovering the line from query 2 to its key tells that cell", body)


def saving(b, name, work, labels):
    svg = b.js("mhaPage.svg()")
    try:
        root = ET.fromstring(svg)
        texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
        # labels are cut to 16 characters in a picture
        ok = root.tag == "{http://www.w3.org/2000/svg}svg" and \
            all((l if len(l) <= 16 else l[:15] + "\u2026") in texts for l in labels) and \
            not any(e.tag.endswith("script") for e in root.iter())
    except ET.ParseError as e:
        ok, texts = False, str(e)
    check(ok, name + ": the view as SVG is well-formed, labels as text, no script", texts)
    png = b.js("new Promise(function (ok) { mhaPage.png(function (blob) { var r = new FileReader(); "
               "r.onload = function () { ok(r.result); }; r.readAsDataURL(blob); }); })")
    raw = base64.b64decode(png.split(",", 1)[1])
    check(raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) > 1000, name + ": the view as PNG (%d bytes)" % len(raw))
    # the buttons: real clicks, real downloads
    for button, ext in (("save-svg", "svg"), ("save-png", "png")):
        pos = b.js("(function () { var e = document.getElementById('%s'); e.scrollIntoView(); "
                   "var r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()"
                   % button)
        b.click(pos[0], pos[1])
        try:
            ev = b.wait_event("Browser.downloadWillBegin", timeout=20)
            name_ = ev["params"]["suggestedFilename"]
            while True:
                p = b.wait_event("Browser.downloadProgress", timeout=20)["params"]
                if p["state"] != "inProgress":
                    break
            ok = p["state"] == "completed" and name_.endswith("." + ext)
        except (TimeoutError, KeyError) as e:
            ok, name_ = False, str(e)
        check(ok, name + ": the %s button downloads %s" % (button, name_))


NQ_OF = {}


def seams(b, name, page):
    """the data's "head" and "range" (what --head and --range will set):
    the page starts on them; its own colour control otherwise"""
    text = open(page, encoding="utf-8").read()
    legend = ("Array.from(document.querySelectorAll('#legend-svg text')).map(function (t) { "
              "return t.textContent; })")
    b.page_url = "file://" + page
    b.open(page)
    check(b.js("document.getElementById('range').value") == "default" and
          b.js(legend)[:5] == ["0", "0.25", "0.5", "0.75", "1"],
          name + ": softmax's colours span 0 to 1 by default", b.js(legend))
    b.js("(function () { var s = document.getElementById('step'); s.value = 'scores'; "
         "s.dispatchEvent(new Event('change')); })()")
    lo, hi = b.js("(function () { var a = [].concat.apply([], mhaPage.seqs[0].heads.map(function (h) { "
                  "return Array.from(h.scores); })); return [Math.min.apply(null, a), Math.max.apply(null, a)]; })()")
    got = b.js(legend)
    check(got[0] == b.js("mhaPage.fmt(%r, 3)" % lo) and got[4] == b.js("mhaPage.fmt(%r, 3)" % hi),
          name + ": scores' colours span their lowest to highest value", (got, lo, hi))
    for head, rng, want_sel, want_ticks in ((2, "[0.1, 0.3]", "given", ["0.1", "0.15", "0.2", "0.25", "0.3"]),
                                           (1, '"auto"', "auto", None)):
        seam = page.replace(".html", "-seam%d.html" % head)
        with open(seam, "w", encoding="utf-8") as f:
            f.write(text.replace('"head": 0, "range": null', '"head": %d, "range": %s' % (head, rng), 1))
        b.page_url = "file://" + seam
        b.open(seam)
        panels = b.js("Array.from(document.querySelectorAll('section.panel')).map(function (s) { "
                      "return s.getAttribute('data-head'); })")
        ticks = b.js(legend)[:5]
        check(panels == [str(head)] and b.js("document.getElementById('range').value") == want_sel and
              (want_ticks is None or ticks == want_ticks) and not b.problems(),
              name + ": data head %d and range %s: the page starts on them" % (head, rng),
              (panels, ticks, b.problems()))


def main():
    exe = find_browser()
    if not exe:
        print("html_check.py: no chromium: install it (make check-browser does)")
        print("0 passed, 1 failed")
        return 1
    work = KEEP or tempfile.mkdtemp(prefix="mha-html.")
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(16)

    def save(name, obj):
        p = os.path.join(work, name)
        with open(p, "w") as f:
            json.dump(obj, f)
        return p

    x = save("x.json", {"X": rng.normal(size=(6, 8)).round(3).tolist()})
    w = save("w.json", {k: rng.normal(size=(8, 8)).round(3).tolist() for k in ("W_Q", "W_K", "W_V", "W_O")})
    w_gqa = save("w-gqa.json", {"W_Q": rng.normal(size=(8, 8)).round(3).tolist(),
                                "W_K": rng.normal(size=(8, 4)).round(3).tolist(),
                                "W_V": rng.normal(size=(8, 4)).round(3).tolist()})
    kv = save("kv.json", {"X": rng.normal(size=(5, 8)).round(3).tolist()})
    xb = save("xb.json", {"X": rng.normal(size=(3, 4, 8)).round(3).tolist()})
    sinks = save("sinks.json", [0.5, -1.0])
    evil = "</script><img src=x onerror=alert(1)>"
    toks = ["The", evil, "bear", "e\u2028ats", "ripe", "fish"]
    tok_arg = ",".join(toks)
    kv_toks = ["k1", "k2", "<b>k3</b>", "k4", "k5"]
    profile = tempfile.mkdtemp(prefix="mha-chromium.")
    downloads = os.path.join(work, "downloads")
    os.makedirs(downloads, exist_ok=True)
    b = Browser(exe, profile, downloads)
    try:
        # two heads, causal, labels with markup and U+2028 in them
        cmd = ["forward", "-x", x, "-w", w, "--heads", "2", "--causal", "--tokens", tok_arg]
        NQ_OF["causal"] = 6
        run_case(b, work, "causal", cmd, 2, toks, cells=[(4, 2, 1), (3, 5, 2), (6, 6, 2)],
                 steps=["scores", "scaled", "masked", "softmax"],
                 json_cmd=cmd + ["-p", "scores,scaled,masked,softmax"])
        check(b.js("document.querySelectorAll('section.panel .rows')[0].children[1].textContent") == evil,
              "causal: the markup token is shown as it is, as text")
        keyboard(b, "causal", cmd)
        seams(b, "causal", os.path.join(work, "causal.html"))
        b.page_url = "file://" + os.path.join(work, "causal.html")
        b.open(os.path.join(work, "causal.html"))
        saving(b, "causal", work, ["The", evil, "fish"])
        # grouped-query and cross-attention, a window, sinks, a softcap
        cmd = ["forward", "-x", x, "-w", w_gqa, "--kv", kv, "--heads", "2", "--kv-heads", "1",
               "--window", "1,1", "--sinks", sinks, "--softcap", "2", "--tokens", tok_arg,
               "--kv-tokens", ",".join(kv_toks)]
        run_case(b, work, "gqa-cross", cmd, 2, toks, kv_tokens=kv_toks, cells=[(2, 2, 1), (5, 1, 2), (6, 5, 2)],
                 steps=["scores", "scaled", "softcapped", "masked", "softmax"],
                 json_cmd=cmd + ["-p", "scores,scaled,masked,softmax"])
        # a softcap and no mask: the softmax is of the softcapped scores
        cmd = ["forward", "-x", x, "-w", w, "--heads", "2", "--softcap", "1.5"]
        run_case(b, work, "softcap", cmd, 2, [str(i) for i in range(1, 7)], cells=[(3, 4, 1), (6, 2, 2)],
                 steps=["scores", "scaled", "softcapped", "softmax"])
        # ALiBi, no labels: numbers
        cmd = ["forward", "-x", x, "-w", w, "--heads", "4", "--alibi", "--causal"]
        run_case(b, work, "alibi", cmd, 4, [str(i) for i in range(1, 7)], cells=[(5, 2, 3), (1, 1, 4)],
                 json_cmd=cmd + ["-p", "scaled,masked"])
        # rotary embeddings: the narration from the rotated rows
        cmd = ["forward", "-x", x, "-w", w, "--heads", "2", "--rope", "half", "--causal"]
        run_case(b, work, "rope", cmd, 2, [str(i) for i in range(1, 7)], cells=[(4, 2, 2)])
        # a q/k norm before the rotation: the page's note, the heads' normalised rows
        cmd = ["forward", "-x", x, "-w", w, "--heads", "2", "--rope", "half", "--causal",
               "--norm", "layer"]
        run_case(b, work, "norm", cmd, 2, [str(i) for i in range(1, 7)], cells=[(5, 3, 1)])
        # multi-head latent attention (samples/latent): each score's content and position parts
        lat = os.path.join(TOP, "samples", "latent")
        cmd = ["forward", "-x", os.path.join(lat, "x.json"), "--heads", "2",
               "--qk-rope-head-dim", "2", "--rope", "interleaved", "--causal"] + \
            [a for opt, f in (("--q-a-proj", "q_a_proj"), ("--q-b-proj", "q_b_proj"),
                              ("--kv-a-proj-with-mqa", "kv_a_proj_with_mqa"),
                              ("--kv-b-proj", "kv_b_proj"), ("--wo", "o_proj"))
             for a in (opt, os.path.join(lat, f + ".json"))]
        run_case(b, work, "mla", cmd, 2, [str(i) for i in range(1, 5)], cells=[(3, 2, 2)])
        # a batch: every sequence in one page, a selector
        cmd = ["forward", "-x", xb, "-w", w, "--heads", "2", "--causal"]
        run_case(b, work, "batch", cmd, 2, ["1", "2", "3", "4"], cells=[(3, 2, 2)], batch=3)
        # --dtype f32: float64's steps, said
        cmd = ["forward", "-x", x, "-w", w, "--heads", "2"]
        run_case(b, work, "f32", cmd, 2, [str(i) for i in range(1, 7)], cells=[(2, 3, 1)], f32=True)
        # one head, -p scores first, no mask: scores, scaled, softmax
        cmd = ["forward", "-x", x, "-w", w]
        run_case(b, work, "one-head", cmd, 1, [str(i) for i in range(1, 7)], cells=[(6, 1, 1)],
                 steps=["scores", "scaled", "softmax"], first="scores")
        check(b.js("document.getElementById('step').value") == "scores" and
              "scores" in b.js("document.querySelector('section.panel h2').textContent"),
              "one-head: --print scores is the step shown first")
        hidden, head, body = hover_cell(b, 0, 0, 2)
        js = json.loads(mha(*(cmd + ["-p", "scores", "-f", "json"])).stdout)
        want = "%.6g" % (js["heads"][0] if "heads" in js else js)["scores"][0][2]
        check(head.endswith("scores = " + want), "one-head: the box gives the step's value", head)

        # d_k and d_v past the terms a cell's sums write out: the page holds those columns of K and V only
        xw = save("xw.json", {"X": rng.normal(size=(6, 32)).round(3).tolist()})
        ww = save("ww.json", {k: (rng.normal(size=(32, 32)) / 4).round(3).tolist() for k in ("W_Q", "W_K", "W_V")})
        cmd = ["forward", "-x", xw, "-w", ww, "--causal"]
        page = run_case(b, work, "wide", cmd, 1, [str(i) for i in range(1, 7)], cells=[(5, 3, 1), (6, 6, 1)])
        data = json.loads(open(page, encoding="utf-8").read().split(
            '<script id="mha-data" type="application/json">', 1)[1].split("</script>", 1)[0])
        check(data["k_cols"] == 12 and data["v_cols"] == 12 and data["d_k"] == 32,
              "wide: the page holds 12 of the 32 columns of K and of V", (data["k_cols"], data["v_cols"]))

        # docs/tutorial.md's picture: the classroom size, a cell hovered
        if SHOT:
            top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            cmd = ["heatmap", "-x", os.path.join(top, "samples", "classroom", "x.json"), "--tokens",
                   "Monica Chandler Ross Rachel Phoebe Joey"]
            page = os.path.join(work, "shot.html")
            mha(*(cmd + ["-o", page]))
            b.page_url = "file://" + page
            b.open(page)
            NKV[0] = 6
            # the colours stretched to the weights shown (0.11 to 0.24 here)
            b.js("(function () { var s = document.getElementById('range'); s.value = 'auto'; "
                 "s.dispatchEvent(new Event('change')); })()")
            hover_cell(b, 0, 3, 1)
            # the page down to the hover box, not the empty window below
            bottom = b.js("Math.ceil(Math.max(document.getElementById('panels').getBoundingClientRect().bottom, "
                          "document.getElementById('tip').getBoundingClientRect().bottom) + 12)")
            shot = b.call("Page.captureScreenshot", {"format": "png", "clip": {
                "x": 0, "y": 0, "width": 1100, "height": min(860, bottom), "scale": 1}}, session=True)["data"]
            with open(SHOT, "wb") as f:
                f.write(base64.b64decode(shot))
            check(os.path.getsize(SHOT) > 10000, "screenshot written to " + SHOT)

        # 200 tokens, 8 heads: the file's size and the load time
        xl = save("x200.json", {"X": rng.normal(size=(200, 64)).round(3).tolist()})
        wl = save("w200.json", {k: (rng.normal(size=(64, 64)) / 8).round(3).tolist()
                                for k in ("W_Q", "W_K", "W_V", "W_O")})
        page = os.path.join(work, "n200.html")
        mha("forward", "-x", xl, "-w", wl, "--heads", "8", "--causal", "-o", page)
        size = os.path.getsize(page)
        b.page_url = "file://" + page
        t0 = time.time()
        b.open(page)
        load = time.time() - t0
        check(size < 12 << 20 and not b.problems(), "n200-h8: %.1f MB, loaded in %.1f s with no error"
              % (size / 1e6, load), b.problems())
        check(b.js("document.querySelectorAll('section.panel').length") == 8 and
              b.js("document.querySelectorAll('section.panel .rows .lab').length") == 8 * 200,
              "n200-h8: 8 panels, every label")
        NKV[0] = 200
        hidden, head, body = hover_cell(b, 7, 199, 100)
        want = explain_cell(["forward", "-x", xl, "-w", wl, "--heads", "8", "--causal"], 200, 101, 8)
        check(body == want, "n200-h8: cell 200,101 of head 8 on hover",
              "%s\npage:\n%s\nexplain:\n%s" % (head, body, want))
    finally:
        b.close()
        shutil.rmtree(profile, ignore_errors=True)
        if not KEEP:
            shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (check.passed, check.failed))
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
