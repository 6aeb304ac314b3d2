#!/usr/bin/env node
// ort_run.js MODULES MODEL X REF N D_MODEL THREADS REPEATS: one ONNX Runtime run.
//
// Loads MODEL (ort_models.py) with onnxruntime-node from MODULES (the
// node_modules directory `make bench` installs it into), THREADS intra-op
// threads and one inter-op thread, and feeds it X (raw float32, (1, N,
// D_MODEL)) once: that warm-up's output must agree with REF (mha's output,
// raw float32) to 1e-4 of REF's largest magnitude (at least 1e-4), or it
// stops there, exit status 1, before any timing.  Then REPEATS timed runs.
// Prints one JSON line: {"seconds": median, "best": ..., "max_diff": ...,
// "maxrss_kib": the process's peak}.
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const a = process.argv.slice(2);
  if (a.length !== 8) {
    console.error('usage: ort_run.js MODULES MODEL X REF N D_MODEL THREADS REPEATS');
    process.exit(2);
  }
  const [modules, model, xfile, reffile] = a;
  const [n, dm, threads, repeats] = a.slice(4, 8).map(Number);
  const ort = require(path.resolve(modules, 'onnxruntime-node'));
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const floats = (file) => {
    const buf = fs.readFileSync(file);
    const v = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
    if (v.length !== n * dm)
      throw new Error(`${file}: ${v.length} floats, expected ${n}x${dm}`);
    return v;
  };
  const x = floats(xfile), ref = floats(reffile);
  const feeds = { x: new ort.Tensor('float32', x, [1, n, dm]) };
  let y = (await session.run(feeds)).y; // warm-up, checked
  let diff = 0, big = 1;
  for (let i = 0; i < ref.length; i++) {
    const e = Math.abs(y.data[i] - ref[i]);
    diff = e > diff || Number.isNaN(e) ? e : diff;
    big = Math.max(big, Math.abs(ref[i]));
  }
  if (!(diff <= 1e-4 * big)) {
    console.error(`output differs from mha's by ${diff} (tolerance ${1e-4 * big})`);
    process.exit(1);
  }
  const times = [];
  for (let r = 0; r < repeats; r++) {
    const t0 = process.hrtime.bigint();
    y = (await session.run(feeds)).y;
    times.push(Number(process.hrtime.bigint() - t0) * 1e-9);
  }
  times.sort((p, q) => p - q);
  console.log(JSON.stringify({
    seconds: times[Math.floor((times.length - 1) / 2)],
    best: times[0],
    max_diff: diff,
    maxrss_kib: process.resourceUsage().maxRSS,
  }));
}

main().catch((e) => {
  console.error(String(e && e.message ? e.message : e).split('\n')[0]);
  process.exit(1);
});
