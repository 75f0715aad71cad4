// ort_run.js: runs one model with ONNX Runtime (onnxruntime-node) for
// tools/gen_contrib_tests.py. Argument: a JSON job file
//   {"model": path, "inputs": [{"name", "type", "dims", "file"}], "out": dir}
// Inputs are raw little-endian files; each output is written to
// <out>/<index>.bin with <out>/outputs.json listing name, type, dims.
// Graph optimizations are off so ORT runs the nodes as written.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array,
  int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, float16: Uint16Array, bool: Uint8Array,
};

function load(inp) {
  const buf = fs.readFileSync(inp.file);
  const A = ARRAYS[inp.type];
  const copy = new Uint8Array(buf.byteLength);
  copy.set(buf);
  const data = new A(copy.buffer, 0, buf.byteLength / A.BYTES_PER_ELEMENT);
  return new ort.Tensor(inp.type, data, inp.dims);
}

async function main() {
  const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const sess = await ort.InferenceSession.create(job.model, {
    graphOptimizationLevel: 'disabled', intraOpNumThreads: 1,
  });
  const feeds = {};
  for (const inp of job.inputs) feeds[inp.name] = load(inp);
  const res = await sess.run(feeds);
  const meta = [];
  sess.outputNames.forEach((name, i) => {
    const t = res[name];
    const d = t.data;
    fs.writeFileSync(path.join(job.out, i + '.bin'),
                     Buffer.from(d.buffer, d.byteOffset, d.byteLength));
    meta.push({name, type: t.type, dims: t.dims});
  });
  fs.writeFileSync(path.join(job.out, 'outputs.json'), JSON.stringify(meta));
}

main().catch((e) => { console.error(String(e && e.message || e)); process.exit(1); });
