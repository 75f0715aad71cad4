// ort_svc.js: bench_svc's varying-width workload on ONNX Runtime (node),
// for the figures beside keel's in README "Memory in a service".
//
//   ./build/bench_svc --model /tmp/svc.onnx
//   NODE_PATH=/work/ort/node_modules node bench/ort_svc.js /tmp/svc.onnx [runs]
//
// Native memory = process RSS minus the host's baseline: RSS after
// onnxruntime-node is loaded and every input array of the workload has been
// made, before the session exists. Same widths and order as bench_svc
// (100 * (1 + (r * 7) % 32)), default session options (arena on), one
// intra-op thread like keel.
const ort = require('onnxruntime-node');

const WIDTHS = 32, H = 32, WARMUP = WIDTHS * 10;

function rss() { return process.memoryUsage().rss; }
function mb(b) { return (b / 1048576).toFixed(1); }

async function main() {
  const path = process.argv[2], runs = parseInt(process.argv[3] || '10000', 10);
  const inputs = [];
  for (let k = 0; k < WIDTHS; k++) {
    const w = 100 * (1 + k), x = new Float32Array(H * w);
    for (let i = 0; i < x.length; i++) x[i] = (i % 17) / 17;
    inputs.push(new ort.Tensor('float32', x, [1, 1, H, w]));
  }
  global.gc && global.gc();
  const base = rss();
  const s = await ort.InferenceSession.create(path, {intraOpNumThreads: 1, interOpNumThreads: 1});
  let lo = Infinity, hi = 0, peak = 0;
  for (let r = 0; r < runs; r++) {
    const k = (r * 7) % WIDTHS;
    const out = await s.run({x: inputs[k]});
    out.y.dispose && out.y.dispose();
    const m = rss() - base;
    peak = Math.max(peak, m);
    if (r >= WARMUP) { lo = Math.min(lo, m); hi = Math.max(hi, m); }
  }
  console.log(`onnxruntime-node ${ort.env.versions ? ort.env.versions.common : ''}: ${runs} runs over ` +
              `${WIDTHS} widths; host baseline ${mb(base)} MB`);
  console.log(`  native memory after ${WARMUP} warm-up runs: ${mb(lo)}..${mb(hi)} MB ` +
              `(lowest ${(100 * (hi - lo) / hi).toFixed(1)}% below the peak); peak overall ${mb(peak)} MB`);
}
main().catch(e => { console.error(e); process.exit(1); });
