// ort_reference.js MODEL_DIR: what ort_script.py does, with ONNX Runtime
// (onnxruntime-node) as the reference; writes JSON to stdout.
//   NODE_PATH=/work/ort/node_modules node tests/python/ort_reference.js \
//       tests/python/models > tests/python/ref/ort_parity.json
const ort = require('onnxruntime-node');
const path = require('path');

function inputs(t, n, batch) {
  const a = new Float32Array(batch * n);
  for (let i = 0; i < a.length; i++) a[i] = (((t * n + i) % 7) - 3) / 4;
  return a;
}
function rows(data, dims) {  // nested lists, as numpy's tolist()
  if (dims.length === 0) return data[0];
  if (dims.length === 1) return Array.from(data);
  const step = dims.slice(1).reduce((p, d) => p * d, 1), out = [];
  for (let i = 0; i < dims[0]; i++) out.push(rows(data.subarray(i * step, (i + 1) * step), dims.slice(1)));
  return out;
}

async function main(dir) {
  const opts = {intraOpNumThreads: 2, interOpNumThreads: 1, graphOptimizationLevel: 'all',
                executionProviders: ['cpu']};
  const sess = await ort.InferenceSession.create(path.join(dir, 'stateful.onnx'), opts);
  let h = new ort.Tensor('float32', new Float32Array(16), [2, 8]);
  const steps = [];
  for (let t = 0; t < 6; t++) {
    const feed = {[sess.inputNames[0]]: new ort.Tensor('float32', inputs(t, 4, 2), [2, 4]),
                  [sess.inputNames[1]]: h};
    const r = await sess.run(feed);
    h = r.h_out;
    steps.push({y: rows(r.y.data, r.y.dims), h: rows(h.data, h.dims)});
  }
  const relu = await ort.InferenceSession.create(path.join(dir, 'one_node.onnx'));
  const x = inputs(3, 16, 1).map(v => v * 2);
  const ry = (await relu.run({x: new ort.Tensor('float32', x, [1, 16])})).y;
  const alias = await ort.InferenceSession.create(path.join(dir, 'alias.onnx'));
  const ra = await alias.run({x: new ort.Tensor('float32', new Float32Array([1, -2, 3.5, 0.25]), [4])});
  const al = {};
  for (const n of alias.outputNames) al[n] = rows(ra[n].data, ra[n].dims);
  process.stdout.write(JSON.stringify({steps, relu: rows(ry.data, ry.dims), alias: al,
                                       ort_version: ort.env.versions.common}, null, 1) + '\n');
}
main(process.argv[2]).catch(e => { console.error(e); process.exit(1); });
