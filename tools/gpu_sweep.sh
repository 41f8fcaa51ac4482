#!/usr/bin/env bash
# One GPU measurement sweep, at most 9 minutes, for a task that is lent a GPU (an H200 here). Through the
# device tool, from the repository root:
#
#     run(command="bash tools/gpu_sweep.sh", timeout_s=600)            # add carry=[".whl"] for bitsandbytes
#
# then copy $OUT's gpu-h200.jsonl to data/measurements/ and run `make accuracy` (it becomes the dataset
# "gpu-h200"). What it needs there: python3 with torch, transformers and peft (the H200 image has them) and
# this repository on PYTHONPATH (no install). qlora and adamw8bit need bitsandbytes, which the image lacks:
# download its manylinux wheel into .whl/ here (see /work/.library/device/README.md) and carry it.
# Smaller cards are emulated with torch.cuda.set_per_process_memory_fraction (tools/sweep_gpu.py).
set -uo pipefail
OUT=${OUT:-data/measurements}
DEADLINE=${DEADLINE:-470}   # seconds after which no new run starts; the last run then ends well inside 9 minutes
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__, 'peft', peft.__version__)"
} > "$OUT/gpu-env.txt" 2>&1
timeout 540 python3 tools/sweep_gpu.py --out "$OUT/gpu-h200.jsonl" --deadline "$DEADLINE" 2>&1 | tee "$OUT/gpu-sweep.log"
echo "rows: $(wc -l < "$OUT/gpu-h200.jsonl" 2>/dev/null || echo 0)"
