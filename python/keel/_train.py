"""keel.Trainer: training through keel's trainer (keel_train.h) from Python.

    t = keel.Trainer("model.onnx", loss="loss", optimizer="adamw", lr=3e-3)
    for x, y in batches:
        loss = t.step([x, y])          # or t.step({"x": x, "y": y})
    t.save("trained.onnx")

Hyperparameters left as None take torch.optim's defaults for the
optimizer. ``data_parallel=True`` under ``mpirun -np N python3 train.py``
makes each process one rank of a data-parallel job (README, "Data-parallel
training over MPI"): gradients are averaged over the ranks in buckets of
``bucket_mb``, ``shard_optimizer=True`` keeps each parameter's optimizer
state on one rank, and ``checkpoint_save`` is then called by every rank.
"""
from ._keel import Trainer as _Trainer


class Trainer(_Trainer):
    def __init__(self, model, loss, optimizer, lr, *, momentum=None, beta1=None, beta2=None, eps=None,
                 weight_decay=None, zero_grad="none", freeze=(), threads=0, mem_limit=0,
                 data_parallel=False, bucket_mb=0.0, shard_optimizer=False):
        def given(v):
            return -1.0 if v is None else float(v)
        super().__init__(str(model), loss, optimizer, float(lr), given(momentum), given(beta1), given(beta2),
                         given(eps), given(weight_decay), zero_grad, list(freeze), int(threads), int(mem_limit),
                         bool(data_parallel), float(bucket_mb), bool(shard_optimizer))
