#!/bin/sh
# engine_check.sh: the engine as a library of its own (engine/mhe.h).
# tests/engine_client is built from engine/libmhe.a and lib/libmha.a alone,
# no object of the mha program: it runs tiny-llama's layer 1 and a
# comparison through the engine, and its messages must be the words the
# program prints.  Every number must be the program's, bit for bit.
#
#   sh tests/engine_check.sh [MHA] [CLIENT]
set -u
MHA=${1:-./mha}
PY=${PYTHON:-python3}
CLIENT=${2:-tests/engine_client}
CK=samples/tiny-llama/model
X=samples/tiny-llama/x.json
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
ok() { echo "ok $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }

# the client links nothing of cli/: no symbol of the program's own in it
if nm "$CLIENT" 2>/dev/null | grep -qE ' [TD] (cmd_|attn_|emit_|report_text|msg_to_stderr)'; then
	bad "client holds the program's code"
else
	ok "client built from the engine alone"
fi

# 1. a checkpoint's layer: each step asked for, the program's numbers exactly (the
# engine's steps are the plain path's: --exact)
for step in q_rot scores softmax output; do
	"$CLIENT" forward "$CK" 1 "$X" "$step" > "$T/engine.$step" 2> "$T/err" ||
		{ bad "forward $step: $(cat "$T/err" "$T/engine.$step")"; continue; }
	"$MHA" forward -w "$CK" --layer 1 -x "$X" --exact --print "$step" -f json --precision 17 \
		> "$T/mha.$step.json" || { bad "mha forward $step"; continue; }
	if "$PY" - "$T/engine.$step" "$T/mha.$step.json" "$step" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().split("\n")
shape = [int(v) for v in lines[0].split()[1:]]
rows = [[float(v) for v in l.split()] for l in lines[1:] if l]
doc = json.load(open(sys.argv[2]))
key = sys.argv[3]
want = doc[key] if key in doc else [h[key] for h in doc["heads"]]  # per head: under "heads"
def flat(v):
    return [x for r in v for x in (flat(r) if isinstance(r[0], list) else r)] if isinstance(v[0], list) else v
got = [x for r in rows for x in r]
exp = flat(want)
assert len(got) == len(exp) == shape[0] * shape[1] * shape[2], (len(got), len(exp), shape)
assert got == [float(x) for x in exp], "numbers differ"
PY
	then ok "forward $step: the program's numbers, $(head -1 "$T/engine.$step")"
	else bad "forward $step"; fi
done

# 1b. results by name, as 'mha forward -o run.npz' names its members: the
# same names, shapes and numbers (their sums), and the meta
for print in output softmax,output all; do
	"$CLIENT" results "$CK" 1 "$X" "$print" > "$T/res.out" 2>&1 || { bad "results $print: $(cat "$T/res.out")"; continue; }
	"$MHA" forward -w "$CK" --layer 1 -x "$X" --print "$print" -f npz -o "$T/res.npz"
	if "$PY" - "$T/res.out" "$T/res.npz" <<'PY'
import json, sys
import numpy as np
text = open(sys.argv[1]).read()
lines, meta_text = text.split("meta: ", 1)[0].split("\n"), text.split("meta: ", 1)[1]
z = np.load(sys.argv[2])
mine = [l.split() for l in lines if l]
theirs = [k for k in z.files if k not in ("meta", "tokens", "kv_tokens")]
assert [m[0] for m in mine] == theirs, ([m[0] for m in mine], theirs)
for m in mine:
    a = z[m[0]]
    assert tuple(int(v) for v in m[1:-1]) == a.shape, (m, a.shape)
    assert float(m[-1]) == float(np.sum(a.ravel())) or abs(float(m[-1]) - a.sum()) <= 1e-12 * max(1, abs(a).sum()), m
meta = json.loads(meta_text)
assert meta == json.loads(str(z["meta"])), "meta differs"
PY
	then ok "results print=$print: the program's names, shapes, numbers and meta"
	else bad "results print=$print"; fi
done

# 2. a comparison: the program's own steps agree; a scale by sqrt(d_model) is named
"$MHA" forward -w "$CK" --layer 1 -x "$X" --print all -f json --precision 17 -o "$T/ours.json" &&
"$MHA" forward -w "$CK" --layer 1 -x "$X" --scale dmodel --print all -f json --precision 17 \
	-o "$T/dmodel.json" || bad "mha forward for compare"
out=$("$CLIENT" compare "$CK" 1 "$X" "$T/ours.json")
case $out in *"verdict: agree=1 "*) ok "compare: its own steps agree";;
	*) bad "compare agree: $out";; esac
out=$("$CLIENT" compare "$CK" 1 "$X" "$T/dmodel.json"); rc=$?
case $rc:$out in 0:*"agree=0"*"mistake=scale-dmodel"*) ok "compare: scale-dmodel named";;
	*) bad "compare dmodel ($rc): $out";; esac
# the program's report names the same mistake
"$MHA" compare -w "$CK" --layer 1 -x "$X" --against "$T/dmodel.json" -f json > "$T/report.json"
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); m=d.get("diagnosis") or {}; sys.exit(0 if "scale-dmodel" in json.dumps(d) else 1)' \
	"$T/report.json" && ok "program's report names it too" || bad "program's report"

# 3. messages: the engine's words are the program's, after "mha: "
check_words() { # name, client args..., then -- program args
	name=$1; shift
	"$CLIENT" "$@" > "$T/c.out" 2>&1; crc=$?
	text=$(sed -n 's/^text: //p' "$T/c.out" | head -1)
	status=$(sed -n 's/^message: error \([0-9]\).*/\1/p' "$T/c.out" | head -1)
	if [ -z "$text" ] || [ "$crc" != "$status" ]; then
		bad "$name: exit $crc, message status '$status': $(cat "$T/c.out")"; return
	fi
	echo "$text" > "$T/c.text"
	ok "$name: $crc, $text"
}
check_words "unknown setting" set head 2
grep -q "unknown setting 'head': did you mean 'heads'?" "$T/c.text" || bad "did you mean"
check_words "bad value" set heads x
grep -q "^message: error 2 {heads} " "$T/c.out" && ok "bad value: about the setting heads" ||
	bad "bad value: no key: $(cat "$T/c.out")"
"$MHA" forward -x "$X" --heads x 2> "$T/p.err"
[ "$(head -1 "$T/p.err")" = "mha: $(cat "$T/c.text")" ] && ok "bad value: the program's words" ||
	bad "bad value words: $(head -1 "$T/p.err") vs $(cat "$T/c.text")"
check_words "missing file" forward "$CK" 1 "$T/none.json" output
"$MHA" forward -w "$CK" --layer 1 -x "$T/none.json" 2> "$T/p.err"
[ "$(head -1 "$T/p.err")" = "mha: $(cat "$T/c.text")" ] && ok "missing file: the program's words" ||
	bad "missing file words: $(head -1 "$T/p.err") vs $(cat "$T/c.text")"
printf '{"X": [[1, 2], [3' > "$T/cut.json"
check_words "damaged file" forward "$CK" 1 "$T/cut.json" output
grep -q "^message: error 1 \[$T/cut.json\]" "$T/c.out" && ok "damaged file: the file named" ||
	bad "damaged file: no file: $(cat "$T/c.out")"
check_words "no such step" forward "$CK" 1 "$X" scorez
# a config.json key of the wrong type: named as the message's key
mkdir "$T/ck" && cp "$CK"/* "$T/ck/" &&
sed 's/"num_attention_heads": 2/"num_attention_heads": "two"/' "$CK/config.json" > "$T/ck/config.json"
check_words "config key" run "$T/ck" 1 "$X"
grep -q "^message: error 1 .*{num_attention_heads} " "$T/c.out" && ok "config key: about num_attention_heads" ||
	bad "config key: no key: $(cat "$T/c.out")"

# 4. arrays in memory (mhe_run_set_array): X as float64, float32, float16 and
# bfloat16 bytes gives the program's numbers for X widened exactly (a .npy of
# float64); a nan and booleans refused, naming "<x>"
if "$PY" -c 'import numpy' 2>/dev/null; then
	"$PY" - "$X" "$T" <<'PY'
import json, sys, numpy as np
x = np.array(json.load(open(sys.argv[1]))["X"], dtype=np.float64)
t = sys.argv[2]
def bf16(a):  # round to nearest even, as torch does
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return u, (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
for name, raw, wide in [("f64", x, x), ("f32", x.astype(np.float32), x.astype(np.float32).astype(np.float64)),
                        ("f16", x.astype(np.float16), x.astype(np.float16).astype(np.float64)),
                        ("bf16",) + bf16(x)]:
    raw.tofile("%s/x.%s" % (t, name))
    np.save("%s/x.%s.npy" % (t, name), wide)
bad = x.copy(); bad[1, 2] = np.nan
bad.tofile("%s/x.nan" % t)
(x > 0).astype(np.uint8).tofile("%s/x.bool" % t)
PY
	for ty in f64 f32 f16 bf16; do
		"$CLIENT" array "$CK" 1 "$T/x.$ty" "$ty" 4 8 output > "$T/arr.$ty" 2>&1 ||
			{ bad "array $ty: $(cat "$T/arr.$ty")"; continue; }
		"$MHA" forward -w "$CK" --layer 1 -x "$T/x.$ty.npy" --exact -f json --precision 17 \
			> "$T/arr.$ty.json"
		if "$PY" -c '
import json, sys
lines = open(sys.argv[1]).read().split("\n")[1:]
got = [float(v) for l in lines if l for v in l.split()]
want = [v for r in json.load(open(sys.argv[2]))["output"] for v in r]
sys.exit(0 if got == want else 1)' "$T/arr.$ty" "$T/arr.$ty.json"; then
			ok "array $ty: the program's numbers for X widened exactly"
		else
			bad "array $ty: numbers differ"
		fi
	done
	# results with print: the run's own, the array gone (overwritten) after
	# the forward; the same sums as from the file
	for print in output softmax,output; do
		"$CLIENT" array "$CK" 1 "$T/x.f64" f64 4 8 "print=$print" > "$T/arr.res" 2>&1 &&
			"$CLIENT" results "$CK" 1 "$T/x.f64.npy" "$print" > "$T/file.res" 2>&1 &&
			[ "$(grep -v '^meta: ' "$T/arr.res")" = "$(grep -v '^meta: ' "$T/file.res")" ] &&
			ok "array f64, print=$print: the results outlive the array" ||
			bad "array f64 print=$print: $(cat "$T/arr.res")"
	done
	check_words "array with a nan" array "$CK" 1 "$T/x.nan" f64 4 8 output
	grep -q "<x>: X: value 10 is nan" "$T/c.out" && ok "array with a nan: the value named" ||
		bad "array nan: $(cat "$T/c.out")"
	check_words "array of booleans" array "$CK" 1 "$T/x.bool" bool 4 8 output
	# their softmax in memory: the program's report, its path aside; a wrong one named
	"$MHA" forward -w "$CK" --layer 1 -x "$X" --print softmax -f npz -o "$T/sm.npz"
	"$PY" -c '
import numpy as np, sys
z = np.load(sys.argv[1]); s = z["heads.softmax"]
s.astype(np.float64).tofile(sys.argv[2])
w = s.copy(); w[1, 2, 0] += 1e-6; w.tofile(sys.argv[3]); np.savez(sys.argv[4], attn_weights=w)' \
		"$T/sm.npz" "$T/sm.raw" "$T/sm_wrong.raw" "$T/sm_wrong.npz"
	"$CLIENT" theirs "$CK" 1 "$X" attn_weights "$T/sm.raw" 2 4 4 > "$T/th.out" 2>&1
	grep -q "^verdict: agree=1 steps=1 " "$T/th.out" && ok "their attn_weights in memory agree" ||
		bad "theirs: $(cat "$T/th.out")"
	"$CLIENT" theirs "$CK" 1 "$X" attn_weights "$T/sm_wrong.raw" 2 4 4 > "$T/th.out" 2>&1
	"$MHA" compare -w "$CK" --layer 1 -x "$X" --against "$T/sm_wrong.npz" > "$T/th.mha"
	sed -n '/^verdict/,/^----$/p' "$T/th.out" | sed '1d;$d' | sed '1s/^.*against/against/' > "$T/th.text"
	sed '1s/^.*against/against/' "$T/th.mha" > "$T/th.want"
	if grep -q "^verdict: agree=0 steps=1 first=softmax" "$T/th.out" && cmp -s "$T/th.text" "$T/th.want"; then
		ok "their wrong softmax in memory: the program's report, word for word"
	else
		bad "theirs wrong: $(cat "$T/th.out") vs $(cat "$T/th.mha")"
	fi
	sed -n '/^----$/,$p' "$T/th.out" | sed 1d | "$PY" -c 'import json, sys; d = json.load(sys.stdin); sys.exit(0 if d["agree"] is False and d["first_difference"] == "softmax" else 1)' &&
		ok "their wrong softmax: the JSON report" || bad "theirs JSON: $(cat "$T/th.out")"
	check_words "array for no input" set-array weights
	"$CLIENT" set-array wq | grep -q "^taken" && ok "array for a single weight taken" ||
		bad "array for wq"
else
	echo "skip arrays in memory (no NumPy)"
fi

# 4b. a checkpoint's layer (mhe_run_model): mha model's tensors (names,
# shapes, sums) and its JSON description of the layer, exactly
"$CLIENT" model "$CK" 1 > "$T/model.out" 2>&1 || bad "model: $(cat "$T/model.out")"
"$MHA" model "$CK" --layer 1 -f json -o "$T/model.npz" > "$T/model.json"
if "$PY" - "$T/model.out" "$T/model.npz" "$T/model.json" <<'PY'
import json, sys
import numpy as np
text = open(sys.argv[1]).read()
lines, meta = text.split("meta: ", 1)
z = np.load(sys.argv[2])
mine = [l.split() for l in lines.split("\n") if l]
assert [m[0] for m in mine] == list(z.files), ([m[0] for m in mine], z.files)
for m in mine:
    assert tuple(int(v) for v in m[1:-1]) == z[m[0]].shape, m
    assert float(m[-1]) == float(np.sum(z[m[0]].ravel())), m
assert json.loads(meta) == json.load(open(sys.argv[3]))["layers"][0], "the description differs"
PY
then ok "model: mha model's tensors and description of layer 1"
else bad "model: $(head -c 300 "$T/model.out")"; fi
check_words "model of a layer past the last" model "$CK" 99
"$MHA" model "$CK" --layer 99 2> "$T/model.err" >/dev/null
[ "mha: $(cat "$T/c.text")" = "$(head -1 "$T/model.err")" ] && ok "model past the last: the program's words" ||
	bad "model past the last: $(cat "$T/c.text") vs $(cat "$T/model.err")"

# 5. the settings' list (mhe_settings): each name taken by mhe_run_set
# (never "unknown setting"), and every option of mha forward and backward
# either in it or the program's own (where its results go and how they
# look, the pictures, --explain)
"$CLIENT" settings > "$T/settings" 2>&1 || bad "settings: $(cat "$T/settings")"
while read -r name kind; do
	case $kind in
	flag) v= ;; count) v=2 ;; number|number-or-word) v=0.5 ;; *) v=z ;;
	esac
	if [ "$kind" = flag ]; then "$CLIENT" set "$name" > "$T/s1" 2>&1; else "$CLIENT" set "$name" "$v" > "$T/s1" 2>&1; fi
	grep -q "unknown setting" "$T/s1" && bad "settings: $name listed, not taken"
done < "$T/settings"
[ "$(wc -l < "$T/settings")" -ge 60 ] && ok "settings: $(wc -l < "$T/settings") listed, each taken" ||
	bad "settings: $(wc -l < "$T/settings") listed"
PROGRAM_ONLY=" output format compress json-nonfinite precision digits full fit cols rows range head pool color explain cell progress quiet force help list-options kv-len "
for cmd in forward backward; do
	for o in $("$MHA" "$cmd" --list-options | sed -n 's/.*"name": "\([^"]*\)".*/\1/p'); do
		grep -q "^$o " "$T/settings" || case "$PROGRAM_ONLY" in *" $o "*) ;; *) bad "settings: mha $cmd --$o is not in the engine's list" ;; esac
	done
done
ok "settings: every option of mha forward and backward listed or the program's own"

[ "$fails" -eq 0 ] || { echo "engine_check: $fails failed"; exit 1; }
echo "engine_check: all passed"
