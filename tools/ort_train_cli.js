// ort_train_cli.js MODEL DIR: the loss ONNX Runtime computes for MODEL on DIR/input_{0,1,2}.pb (x, t, r).
// Wrote tests/train_cli/ort_saved_adam40.txt for the model `keel train` saves after 40 Adam steps
// (tests/test_train_cli.sh): NODE_PATH=/work/ort/node_modules node tools/ort_train_cli.js SAVED.onnx tests/train_cli/data_0
const ort = require('onnxruntime-node');
const { execSync } = require('child_process');
(async () => {
  const s = await ort.InferenceSession.create(process.argv[2]);
  const feeds = {};
  const arrs = JSON.parse(execSync(`/usr/bin/python3 -c "
import json,sys; from onnx import numpy_helper, TensorProto
out=[]
for k in range(3):
  t=TensorProto(); t.ParseFromString(open('${process.argv[3]}/input_%d.pb'%k,'rb').read())
  a=numpy_helper.to_array(t); out.append([list(a.shape), a.ravel().tolist()])
print(json.dumps(out))"`).toString());
  ['x', 't', 'r'].forEach((n, i) => { feeds[n] = new ort.Tensor('float32', Float32Array.from(arrs[i][1]), arrs[i][0]); });
  const o = await s.run(feeds);
  console.log(o.loss.data[0].toPrecision(9));
})();
