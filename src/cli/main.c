/* main.c: the `keel` command: run, test, info, memcheck, ops, bench, shard, train. */
#include <string.h>

#include "cli/cli.h"

static const char *g_usage[][2] = {
    {"run", "keel run MODEL [--data DIR | --input NAME=FILE.pb ...] [--iters N] [--out DIR]\n"
            "               [--mem-limit SIZE] [--mem-report] [--mem-top N] [--trace FILE.json]\n"
            "               [--threads N] [--deterministic] [--timeout MS] [--max-iterations N]\n"
            "               [--no-auto-trim] [--trim-window RUNS] [--trim-margin PCT] [--device cpu|cuda[:N]|emu]\n"
            "  Runs MODEL and prints each output's name, type, shape and values, then the\n"
            "  memory statistics. Inputs not given are generated (symbolic dims = 1).\n"
            "  --timeout stops each run after MS milliseconds (exit 1, naming the node and\n"
            "  iteration); --max-iterations sets the per-run loop iteration guard (< 0: none).\n"
            "  Free segments no run used for RUNS runs (default 8) return to the system,\n"
            "  keeping PCT percent (default 25) above the recent peak; --no-auto-trim keeps them.\n"
            "  --mem-report prints memory per node (top 20, or N); --trace writes a Chrome\n"
            "  trace (node timeline, allocated and reserved bytes). --deterministic gives the\n"
            "  same bits at any --threads (KEEL_OPT_DETERMINISTIC).\n"
            "  mpirun -np N keel run DIR ...: DIR holds rank_0.onnx ... rank_{N-1}.onnx; each\n"
            "  rank runs its own file, rank 0 prints."},
    {"test", "keel test PATH... [--json FILE] [--expect LIST] [--repeat N] [--mem-limit SIZE] [--threads N]\n"
             "               [--roundtrip] [--check-shapes] [--no-passes] [--deterministic] [--device D]\n"
             "  Runs ONNX backend test folders (model.onnx + test_data_set_*), or folders of\n"
             "  them, and compares with output_K.pb. --expect LIST fails if a test named in\n"
             "  LIST (one per line) does not pass. --repeat N runs each data set N times and\n"
             "  fails a test whose allocated bytes change after the first run.\n"
             "  --roundtrip runs each model as keel's ONNX writer writes it back (load, write,\n"
             "  load, write again: the last writings must be identical).\n"
             "  --check-shapes compares every value a node reads or writes with its shape\n"
             "  from symbolic shape inference (a disagreement fails the test) and prints\n"
             "  how many values were fully known, symbolic and unknown. --no-passes runs\n"
             "  each model as written (no optimizing graph passes). --deterministic: the same\n"
             "  bits at any --threads (KEEL_OPT_DETERMINISTIC). --device cuda --plan-only: the\n"
             "  placement for a GPU, run on the CPU (KEEL_OPT_PLAN_ONLY).\n"
             "  Under mpirun a folder of rank_R.onnx is a test: rank 0's outputs are compared."},
    {"info", "keel info MODEL [--json] [--nodes] [--shapes] [--device cuda[:N]|emu]\n"
             "  Prints producer, IR version, opsets, inputs, outputs, node counts, the\n"
             "  kernels bound, the control-flow tree, what the load-time passes folded and\n"
             "  weight bytes; --nodes adds every node (after the passes) with its graph\n"
             "  and the kernel bound to it; --shapes every value's inferred shape\n"
             "  ([batch, seq+1, 768], ? where it cannot be known) and the counts of fully\n"
             "  known, symbolic and unknown values. --device cuda[:N]: the placement on that\n"
             "  GPU (nodes on the GPU, MemcpyFromHost / MemcpyToHost copies; on any machine,\n"
             "  the device not opened), with --nodes each node's device. For a shard folder (keel shard's\n"
             "  rank_R.onnx files): per rank, the parameters kept, their bytes and where\n"
             "  the collectives are."},
    {"memcheck", "keel memcheck MODEL [--data DIR] [--iters N] [--loop NAME] [--plot FILE.svg]\n"
                 "              [--mem-limit SIZE] [--threads N] [--device D]\n"
                 "  Runs MODEL N times and prints allocated and reserved bytes after each\n"
                 "  run; exits 1 if allocated memory grew after the first run (or across the\n"
                 "  iterations of loop NAME), naming the values whose blocks survived.\n"
                 "  --plot draws both as SVG. Under mpirun MODEL may be a folder of rank_R.onnx;\n"
                 "  every rank reports (mpirun --tag-output)."},
    {"shard", "keel shard MODEL --tp N --out DIR [--split-vocab] [--external-data]\n"
              "  Splits MODEL's transformer blocks N ways (tensor parallel, Megatron-LM style)\n"
              "  into DIR/rank_0.onnx ... rank_{N-1}.onnx and DIR/manifest.json; run them with\n"
              "  mpirun -np N keel run DIR. --split-vocab makes the LM head vocabulary-parallel\n"
              "  (AllGather). --external-data puts each rank's weights in DIR/rank_R.data\n"
              "  (automatic past 1 GiB a rank). A block it cannot split correctly is refused,\n"
              "  naming the node."},
    {"ops", "keel ops [--markdown]\n"
            "  Lists the operators keel implements: domain, opset range, element types."},
    {"bench", "keel bench MODEL [--data DIR | --input NAME=FILE.pb ...] [--threads N] [--iters N]\n"
              "                [--warmup N] [--profile-runs N] [--flops] [--peak GFLOPS] [--json FILE]\n"
              "                [--mem-limit SIZE] [--deterministic] [--device D]\n"
              "  Times N runs (default 20, after 3 warmup runs) without profiling: median and\n"
              "  p90 latency, runs per second, peak RSS, allocated and reserved peaks. Then\n"
              "  separate profiled runs (default 3) give time per op type, and with --flops\n"
              "  the GFLOP/s of Conv, MatMul and Gemm nodes (as a share of --peak GFLOPS,\n"
              "  e.g. bench/fma_peak's figure). --json writes every figure and run time.\n"
              "  --threads N sets keel_options.threads (0 = default); --deterministic cuts work\n"
              "  as for 16 threads at any N (KEEL_OPT_DETERMINISTIC), to measure what it costs."},
    {"train", "keel train MODEL --loss NAME --data DIR [--data DIR ...] --steps N\n"
              "           --optimizer sgd|momentum|adam|adamw --lr X [--momentum M] [--beta1 B] [--beta2 B] [--eps E]\n"
              "           [--weight-decay W] [--zero-grad none|zeros] [--freeze NAME,...] [--save OUT.onnx] [--checkpoint DIR] [--resume DIR]\n"
              "           [--log FILE.jsonl] [--mem-limit SIZE] [--threads N] [--device D]\n"
              "           [--data-parallel [--rank-data R:DIR ...] [--bucket-mb MB] [--shard-optimizer]]\n"
              "  Trains the float initializers the output NAME (a float scalar loss) depends on,\n"
              "  minus --freeze, as torch.optim does. Step k uses the data folders in turn\n"
              "  (input_K.pb: the data inputs in graph-input order) and prints loss and memory;\n"
              "  --log writes one JSON object per step. --checkpoint writes parameters and\n"
              "  optimizer state after the last step, --resume continues from one, --save\n"
              "  writes the model with the trained values. Exits 1 when allocated memory after\n"
              "  the last step differs from that after step 2, naming the blocks that survived\n"
              "  (for main-graph blocks the iteration is the training step).\n"
              "  --device cuda[:N]|emu (run, test, bench, memcheck, train): keel_options.device;\n"
              "  placed nodes run on that GPU (no GPU: refused with the reason); emu is a GPU\n"
              "  emulated on the host, for testing the device path without one.\n"
              "  --data-parallel (mpirun -np N): rank r trains on folders r, r+N, ... (or on the\n"
              "  folders --rank-data gives it); gradients\n"
              "  are averaged over the ranks in buckets of --bucket-mb (default 25); rank 0\n"
              "  prints the steps (the ranks' mean loss) and writes --save and --checkpoint;\n"
              "  --shard-optimizer keeps each parameter's optimizer state on one rank (ZeRO-1)."},
};

int cli_usage(const char *cmd, const char *problem) {
  if (problem) fprintf(stderr, "keel: %s\n", problem);
  fprintf(stderr, "usage:\n");
  for (size_t i = 0; i < sizeof g_usage / sizeof g_usage[0]; i++)
    if (!cmd || !strcmp(cmd, g_usage[i][0])) fprintf(stderr, "%s\n", g_usage[i][1]);
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2) return cli_usage(NULL, NULL);
  const char *cmd = argv[1];
  if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(cmd, "test")) return cmd_test(argc - 2, argv + 2);
  if (!strcmp(cmd, "info")) return cmd_info(argc - 2, argv + 2);
  if (!strcmp(cmd, "memcheck")) return cmd_memcheck(argc - 2, argv + 2);
  if (!strcmp(cmd, "ops")) return cmd_ops(argc - 2, argv + 2);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
  if (!strcmp(cmd, "shard")) return cmd_shard(argc - 2, argv + 2);
  if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
    cli_usage(NULL, NULL);
    return 0;
  }
  return cli_usage(NULL, "unknown command");
}
