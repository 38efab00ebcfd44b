#!/bin/sh
# SGLang's own attention backends on the lent H200 (issue 31): the role's derivation (inferops-flashinfer's venv side:
# SGLang's backend planning, with GPU memory watched while it runs), jit_cache's warm-up of what it derived, then
# sglang_backend_check.py (forward_extend / forward_decode on the GPU against torch, FlashInfer's cache watched).
# Carry .whl/ (tests/device/README.md: "SGLang's backends"). PHASE=start runs it in the background (results in
# /tmp/sgl-run), PHASE=collect waits up to 9 minutes and copies them to $OUT.
set -u
case "${PHASE:-all}" in
  start)
    rm -rf /tmp/sgl-repo /tmp/sgl-run && cp -a . /tmp/sgl-repo && mkdir -p /tmp/sgl-run || exit 1
    (cd /tmp/sgl-repo && setsid env OUT=/tmp/sgl-run PHASE=all sh tests/device/run-sglang-backend.sh </dev/null >/tmp/sgl-run/run.log 2>&1 &)
    echo "started in the background: /tmp/sgl-run"; exit 0 ;;
  collect)
    waited=0
    while [ ! -f /tmp/sgl-run/done ] && [ "$waited" -lt "${WAIT:-540}" ]; do sleep 10; waited=$((waited + 10)); done
    cp -a /tmp/sgl-run/. "${OUT:?}/" 2>/dev/null
    cat /tmp/sgl-run/summary.txt 2>/dev/null; [ -f /tmp/sgl-run/done ] && exit 0
    echo "still running after ${waited} s:"; tail -5 /tmp/sgl-run/run.log; exit 3 ;;
esac
out=${OUT:?}
py=/opt/torch/.venv/bin/python3
site=/tmp/sgl-site
step() { echo "$1 rc=$2 seconds=$3" >> "$out/summary.txt"; }
t0=$(date +%s)
rm -rf "$site" && mkdir -p "$site"
$py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl || exit 1
tar -C "$site" -xJf .whl/sglang-0.5.23-py.tar.xz && tar -C "$site" -xJf .whl/flashinfer_python-0.7.2-py3-none-any.tar.xz || exit 1
step install 0 $(( $(date +%s) - t0 ))
export PYTHONPATH="$site:$PWD/tests/device/stubs" PYTHONUNBUFFERED=1
cuda=/usr/local/cuda-13.0; [ -x $cuda/bin/nvcc ] || cuda=/usr/local/cuda
export CUDA_HOME="$cuda" PATH="$cuda/bin:$PATH" FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
export SGLANG_CACHE_DIR=/tmp/sgl-ws/sglang FLASHINFER_WORKSPACE_BASE=/tmp/sgl-ws TRITON_CACHE_DIR=/tmp/sgl-ws/triton
export SGLANG_JIT_CACHE_DIR=/tmp/sgl-ws/sglang/jit
rm -rf /tmp/sgl-ws /tmp/sgl-zoo && mkdir -p /tmp/sgl-ws /tmp/sgl-zoo
models=$PWD/molecule/lab/models/zoo
zoo() { name=$1; shift; { echo "model-path: $models/$1"; echo "attention-backend: flashinfer"; echo "tp-size: 1"; shift
  for line in "$@"; do echo "$line"; done; } > "/tmp/sgl-zoo/$name.yaml"; }
zoo llama2-7b llama2-7b
zoo llama3.2-1b llama3.2-1b
zoo gemma2-9b gemma2-9b
zoo deepseek-v2-lite deepseek-v2-lite
zoo llama3.1-8b-fp8kv llama3.1-8b "kv-cache-dtype: fp8_e4m3"
zoo llama3.1-8b-eagle3 llama3.1-8b "speculative-algorithm: EAGLE3" "speculative-draft-model-path: $models/eagle3-llama3.1-8b" \
  "speculative-num-steps: 3" "speculative-eagle-topk: 1" "speculative-num-draft-tokens: 4"
# a Kimi-K2.6-shaped model (MLA, 64 heads on the one GPU): planned through SGLang's own MLA attention layer
zoo kimi-k2.6 kimi-k2.6
request=$($py -c 'import glob, json; print(json.dumps({"modules": [], "derive": True, "sglang_configs": sorted(glob.glob("/tmp/sgl-zoo/*.yaml"))}))')
side=roles/inferops/files/inferops_flashinfer_venv.py
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits > "$out/gpu-memory-before.txt"
t0=$(date +%s)
$py $side plan "$request" > "$out/plan.out" 2> "$out/plan.err" & pid=$!
peak=0
while kill -0 $pid 2>/dev/null; do
  used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1); [ "${used:-0}" -gt "$peak" ] && peak=$used
  sleep 0.2
done
wait $pid; rc=$?
echo "GPU memory used (MiB) before the plan: $(cat "$out/gpu-memory-before.txt"), highest while it ran: $peak" >> "$out/summary.txt"
step plan $rc $(( $(date +%s) - t0 ))
if [ -n "${PLAN_ONLY:-}" ]; then touch "$out/done"; exit 0; fi  # the derivation alone (PLAN_ONLY=1): minutes of warm-up saved
t0=$(date +%s)
$py $side warm "$request" > "$out/warm.out" 2> "$out/warm.err"; step warm $? $(( $(date +%s) - t0 ))
t0=$(date +%s)
$py tests/device/sglang_backend_check.py /tmp/sgl-zoo/*.yaml > "$out/backend.json" 2> "$out/backend.err"; step backend $? $(( $(date +%s) - t0 ))
ls -R /tmp/sgl-ws/triton /tmp/sgl-ws/sglang > "$out/other-caches.txt" 2>&1
touch "$out/done"
