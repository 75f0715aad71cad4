// ort_bench.js: times ONNX Runtime (onnxruntime-node) on one model, as
// keel bench does for keel, so bench/vs_ort.sh can put the two side by side.
//
//   node bench/ort_bench.js MODEL DATA_DIR [--threads N] [--iters N]
//        [--warmup N] [--json FILE] [--dump DIR]
//
// The session: intraOpNumThreads = N, interOpNumThreads = 1,
// graphOptimizationLevel 'all', sequential execution. Inputs are the
// input_K.pb files of DATA_DIR (a backend-test data set), matched to the
// model's inputs by the TensorProto's name, else in order. Prints (and with
// --json writes) the median and p90 of session.run over the timed runs and
// the peak RSS of this process (VmHWM) minus its baseline (VmHWM read before
// onnxruntime-node is loaded: the node host's own pages), and the median
// process CPU time per run (process.cpuUsage, every thread: ORT's workers
// spin while they wait, so above 1 thread it counts that too). --dump DIR writes
// each output as raw little-endian bytes plus DIR/outputs.json (names,
// types, dims) for bench/check_outputs.py.
'use strict';
const fs = require('fs');
const path = require('path');

function procStatusKB(field) {
  const m = fs.readFileSync('/proc/self/status', 'utf8').match(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm'));
  return m ? Number(m[1]) * 1024 : 0;
}
const baselineRss = procStatusKB('VmHWM');

// ------------------------------------------------ a TensorProto reader
// Only what backend-test data sets use: dims (1), data_type (2), name (8),
// raw_data (9), and the typed fields float_data (4), int32_data (5),
// int64_data (7), double_data (10).
function readVarint(buf, pos) {
  let v = 0n, shift = 0n;
  for (;;) {
    const b = buf[pos.i++];
    v |= BigInt(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
    shift += 7n;
  }
}

const TYPES = { // ONNX data_type -> [ORT type, TypedArray, bytes]
  1: ['float32', Float32Array, 4], 2: ['uint8', Uint8Array, 1], 3: ['int8', Int8Array, 1],
  5: ['int16', Int16Array, 2], 6: ['int32', Int32Array, 4], 7: ['int64', BigInt64Array, 8],
  9: ['bool', Uint8Array, 1], 11: ['float64', Float64Array, 8],
};

function parseTensorProto(buf) {
  const t = { dims: [], dataType: 0, name: '', raw: null, typed: [] };
  const pos = { i: 0 };
  while (pos.i < buf.length) {
    const key = Number(readVarint(buf, pos));
    const field = key >> 3, wire = key & 7;
    if (wire === 0) {
      const v = readVarint(buf, pos);
      if (field === 1) t.dims.push(Number(v));
      else if (field === 2) t.dataType = Number(v);
      else if (field === 5 || field === 7) t.typed.push(v);
    } else if (wire === 2) {
      const len = Number(readVarint(buf, pos));
      const bytes = buf.subarray(pos.i, pos.i + len);
      pos.i += len;
      if (field === 8) t.name = bytes.toString('utf8');
      else if (field === 9) t.raw = bytes;
      else if (field === 1 || field === 5 || field === 7) {
        const p = { i: 0 };
        while (p.i < bytes.length) {
          const v = readVarint(bytes, p);
          if (field === 1) t.dims.push(Number(v)); else t.typed.push(v);
        }
      } else if (field === 4) {
        for (let k = 0; k < len; k += 4) t.typed.push(bytes.readFloatLE(k));
      } else if (field === 10) {
        for (let k = 0; k < len; k += 8) t.typed.push(bytes.readDoubleLE(k));
      }
    } else if (wire === 5) pos.i += 4;
    else if (wire === 1) pos.i += 8;
    else throw new Error(`unsupported protobuf wire type ${wire}`);
  }
  return t;
}

function toOrtTensor(ort, t) {
  const spec = TYPES[t.dataType];
  if (!spec) throw new Error(`input '${t.name}': data type ${t.dataType} not handled`);
  const [type, Arr, size] = spec;
  const n = t.dims.reduce((a, b) => a * b, 1);
  let data;
  if (t.raw) {
    const copy = Buffer.from(t.raw); // aligned copy
    data = new Arr(copy.buffer, copy.byteOffset, n);
    if (copy.byteOffset % size) data = new Arr(new Uint8Array(copy).buffer, 0, n);
  } else {
    data = new Arr(n);
    for (let k = 0; k < n; k++) {
      const v = t.typed[k];
      data[k] = Arr === BigInt64Array ? BigInt(v) : Number(v);
    }
  }
  if (type === 'bool') data = new Uint8Array(data.buffer, data.byteOffset, n);
  return new ort.Tensor(type, data, t.dims);
}

// ------------------------------------------------------------- timing
function quantile(sorted, q) {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

function parseArgs(argv) {
  const a = { threads: 1, iters: 20, warmup: 3, json: null, dump: null, pos: [] };
  for (let i = 0; i < argv.length; i++) {
    const s = argv[i];
    if (s === '--threads') a.threads = Number(argv[++i]);
    else if (s === '--iters') a.iters = Number(argv[++i]);
    else if (s === '--warmup') a.warmup = Number(argv[++i]);
    else if (s === '--json') a.json = argv[++i];
    else if (s === '--dump') a.dump = argv[++i];
    else if (s.startsWith('--')) throw new Error(`unknown option ${s}`);
    else a.pos.push(s);
  }
  if (a.pos.length !== 2 || !(a.threads >= 1) || !(a.iters >= 1) || !(a.warmup >= 0))
    throw new Error('usage: node ort_bench.js MODEL DATA_DIR [--threads N] [--iters N] ' +
                    '[--warmup N] [--json FILE] [--dump DIR]');
  return a;
}

function loadFeeds(ort, session, dir) {
  const files = fs.readdirSync(dir).filter((f) => /^input_\d+\.pb$/.test(f))
    .sort((x, y) => Number(x.match(/\d+/)[0]) - Number(y.match(/\d+/)[0]));
  const feeds = {};
  files.forEach((f, k) => {
    const t = parseTensorProto(fs.readFileSync(path.join(dir, f)));
    const name = session.inputNames.includes(t.name) ? t.name : session.inputNames[k];
    if (name === undefined) throw new Error(`${f}: the model has only ${session.inputNames.length} inputs`);
    feeds[name] = toOrtTensor(ort, t);
  });
  return feeds;
}

function dumpOutputs(dir, session, out) {
  fs.mkdirSync(dir, { recursive: true });
  const meta = session.outputNames.map((name, k) => {
    const t = out[name];
    const d = t.data;
    fs.writeFileSync(path.join(dir, `output_${k}.bin`), Buffer.from(d.buffer, d.byteOffset, d.byteLength));
    return { name, type: t.type, dims: t.dims };
  });
  fs.writeFileSync(path.join(dir, 'outputs.json'), JSON.stringify(meta, null, 1));
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const ort = require('onnxruntime-node');
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(a.pos[0], {
    intraOpNumThreads: a.threads, interOpNumThreads: 1,
    graphOptimizationLevel: 'all', executionMode: 'sequential',
  });
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const feeds = loadFeeds(ort, session, a.pos[1]);
  let out = null;
  for (let i = 0; i < a.warmup; i++) out = await session.run(feeds);
  const times = [], cpu = [];
  for (let i = 0; i < a.iters; i++) {
    const c = process.cpuUsage();
    const s = process.hrtime.bigint();
    out = await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - s) / 1e6);
    const d = process.cpuUsage(c);
    cpu.push((d.user + d.system) / 1e3);
  }
  if (a.dump) dumpOutputs(a.dump, session, out);
  const sorted = times.slice().sort((x, y) => x - y);
  const peak = procStatusKB('VmHWM');
  const r = {
    runtime: 'onnxruntime-node', version: require('onnxruntime-node/package.json').version,
    model: a.pos[0], threads: a.threads, iters: a.iters, warmup: a.warmup, load_ms: loadMs,
    median_ms: quantile(sorted, 0.5), p90_ms: quantile(sorted, 0.9),
    runs_per_s: 1000 / quantile(sorted, 0.5), times_ms: times,
    cpu_median_ms: quantile(cpu.slice().sort((x, y) => x - y), 0.5), cpu_times_ms: cpu,
    peak_rss: peak, baseline_rss: baselineRss, peak_rss_net: peak - baselineRss,
  };
  const mb = (b) => (b / 1048576).toFixed(1);
  console.log(`onnxruntime-node ${r.version}, ${a.threads} thread(s): median ${r.median_ms.toFixed(3)} ms, ` +
              `p90 ${r.p90_ms.toFixed(3)} ms over ${a.iters} runs, CPU ${r.cpu_median_ms.toFixed(3)} ms per run; peak RSS ${mb(peak)} MB ` +
              `(${mb(r.peak_rss_net)} MB over the host's ${mb(baselineRss)} MB)`);
  if (a.json) fs.writeFileSync(a.json, JSON.stringify(r, null, 1) + '\n');
}

main().catch((e) => { console.error(`ort_bench: ${e.message || e}`); process.exit(1); });
