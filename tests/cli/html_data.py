#!/usr/bin/env python3
"""html_data.py PAGE.html [RUN.json]: what an mha page holds, without a browser.

Prints the page's shape (queries, keys, heads, sequences, the steps each head
embeds, the labels as Python escapes them) and checks the file: one data
element, no '<', U+2028 or U+2029 in the data, nothing that names a URL.
With RUN.json ('mha forward ... -p scores,softmax -f json' of the same run):
each head's embedded scores and softmax, decoded from their float64 bytes,
are the JSON output's bit for bit (a batch: each sequence's).
"""
import base64
import json
import re
import struct
import sys

text = open(sys.argv[1], encoding="utf-8").read()
parts = text.split('<script id="mha-data" type="application/json">')
assert len(parts) == 2, "one data element"
data = parts[1].split("</script>", 1)[0]
bad = [p for p in ("<", "\u2028", "\u2029") if p in data]
urls = [p for p in (r"http:", r"https:", r"@import", r"(?<![a-z])url\(", r"(src|href)\s*=\s*[\"']?\s*//")
        if re.search(p, text, re.I)]
print("data escaped:", "yes" if not bad else "no %r" % bad)
print("no URL:", "yes" if not urls else "no %r" % urls)
d = json.loads(data)
print("n_q %d n_kv %d heads %d kv_heads %d d_k %d d_v %d step %s f32 %s" %
      (d["n_q"], d["n_kv"], d["heads"], d["kv_heads"], d["d_k"], d["d_v"], d["step"], d["f32"]))
print("shown first: head %d (0: all) range %r" % (d["head"], d["range"]))
print("tokens", ascii(d["tokens"]), "kv_tokens", ascii(d["kv_tokens"]))
print("mask", ascii(d["mask_how"]), "sinks", d["sinks"], "alibi", d["alibi"], "softcap", d["softcap"])
for s in d["sequences"]:
    print("sequence %r offset %d mask %s (shared %s); head 1 holds %s" %
          (s["title"], s["offset"], ascii(s["mask_how"]), "mask" in s, " ".join(k for k in s["heads"][0])))


def values(b64):
    raw = base64.b64decode(b64)
    return list(struct.unpack("<%dd" % (len(raw) // 8), raw))


if len(sys.argv) > 2:
    run = json.load(open(sys.argv[2]))
    B = len(d["sequences"])

    def flat(m):
        return [float(v) for row in m for v in row]
    same = True
    for b, s in enumerate(d["sequences"]):
        for h, hd in enumerate(s["heads"]):
            for step in ("scores", "softmax"):
                src = run["heads"][h][step] if "heads" in run else run[step]
                want = flat(src[b] if B > 1 else src)
                if values(hd[step]) != want:
                    same = False
                    print("differs: sequence %d head %d %s" % (b + 1, h + 1, step))
    print("scores and softmax bit for bit:", "yes" if same else "no")
