#!/bin/sh
# SGLang's own attention backends on the lent H200 (issue 31): the role's derivation (inferops-flashinfer's venv side:
# SGLang's backend planning, with GPU memory watched while it runs), jit_cache's warm-up of what it derived, then
# sglang_backend_check.py (forward_extend / forward_decode on the GPU against torch, FlashInfer's cache watched).
# Carry .whl/ (tests/device/README.md: "SGLang's backends"). PHASE=start runs it in the background (results in
# /tmp/sgl-run), PHASE=collect waits up to 9 minutes and copies them to $OUT. ZOO names the configurations (default:
# the seven of results/2026-12-05-h200-any-backend); CHECKS which checks run (default: backend): backend (sglang_backend_check.py), oracle
# (kit_oracle.py, SGLang's own attention test kit, over the same configurations), triton (kit_oracle.py over the
# configurations whose attention is Triton's, twice: from an empty Triton cache, then from the one the first run filled;
# it needs no warm-up and runs before the derivation), probe (the kit's verify-through-CUDA-graph cases again, captured at
# 2 and at 8 requests). ATTENTION_ONLY=1: the configurations sample with torch, so
# FlashInfer's sampling module is neither planned nor warmed.
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
models=$PWD/extensions/molecule/lab/models/zoo
# zoo NAME MODEL BACKEND TP [LINE ...]: one configuration, written when ZOO names it
ZOO=${ZOO:-llama2-7b llama3.2-1b gemma2-9b deepseek-v2-lite llama3.1-8b-fp8kv llama3.1-8b-eagle3 kimi-k2.6}
zoo() { name=$1; case " $ZOO " in *" $name "*) ;; *) return 0 ;; esac
  { echo "model-path: $models/$2"; echo "attention-backend: $3"; echo "tp-size: $4"; shift 4
    for line in "$@"; do echo "$line"; done
    # ATTENTION_ONLY=1: SGLang samples with torch, so neither the plan nor the warm-up takes FlashInfer's sampling module
    # (the kit checks attention only; its warm-up is 100 s of nvcc)
    [ -z "${ATTENTION_ONLY:-}" ] || echo "sampling-backend: pytorch"; } > "/tmp/sgl-zoo/$name.yaml"; }
eagle3="speculative-draft-model-path: $models/eagle3-llama3.1-8b"
zoo llama2-7b llama2-7b flashinfer 1
zoo llama3.2-1b llama3.2-1b flashinfer 1
zoo gemma2-9b gemma2-9b flashinfer 1
zoo deepseek-v2-lite deepseek-v2-lite flashinfer 1
zoo llama3.1-8b llama3.1-8b flashinfer 1
zoo llama3.1-8b-fp8kv llama3.1-8b flashinfer 1 "kv-cache-dtype: fp8_e4m3"
zoo llama3.1-8b-eagle3 llama3.1-8b flashinfer 1 "speculative-algorithm: EAGLE3" "$eagle3" \
  "speculative-num-steps: 3" "speculative-eagle-topk: 1" "speculative-num-draft-tokens: 4"
zoo llama3.1-8b-eagle3-tree llama3.1-8b flashinfer 1 "speculative-algorithm: EAGLE3" "$eagle3" \
  "speculative-num-steps: 3" "speculative-eagle-topk: 4" "speculative-num-draft-tokens: 8"
# a Kimi-K2.6-shaped model (MLA): on the one GPU (64 heads), and one rank of TP 8 (8 heads) with FlashInfer's attention
# and with Triton's (SGLang's choice for it on RTX PRO 6000)
zoo kimi-k2.6 kimi-k2.6 flashinfer 1
zoo kimi-k2.6-tp8 kimi-k2.6 flashinfer 8
zoo kimi-k2.6-tp8-triton kimi-k2.6 triton 8
# the same under DFLASH, with a draft of the public shape of the Kimi-K2.6 DFlash draft
zoo kimi-k2.6-tp8-triton-dflash kimi-k2.6 triton 8 "speculative-algorithm: DFLASH" \
  "speculative-draft-model-path: $models/dflash-kimi-k2.6"
# the configurations whose attention is Triton's, and the others (file names are the harness's own, without spaces)
triton_configs=$(grep -l 'attention-backend: triton' /tmp/sgl-zoo/*.yaml)
other_configs=$(grep -L 'attention-backend: triton' /tmp/sgl-zoo/*.yaml)
# run_check NAME: one check of CHECKS (the kit over Triton's configurations needs no warm-up, and runs first)
# shellcheck disable=SC2086  # the config lists split into one argument per file
run_check() {
  t0=$(date +%s)
  case $1 in
    backend) $py tests/device/sglang_backend_check.py /tmp/sgl-zoo/*.yaml > "$out/backend.json" 2> "$out/backend.err" ;;
    oracle) $py tests/device/kit_oracle.py $other_configs > "$out/oracle.json" 2> "$out/oracle.err" ;;
    probe) # the kit's verify through CUDA graphs again, captured at the batch's own size (2: no padded replay) and at 8
           $py tests/device/kit_oracle.py --only "verify, CUDA graph" --capture-batch-size 2 $other_configs \
             > "$out/probe-2.json" 2> "$out/probe-2.err"
           step probe-2 $? "$(( $(date +%s) - t0 ))"; t0=$(date +%s)
           $py tests/device/kit_oracle.py --only "verify, CUDA graph" --capture-batch-size 8 $other_configs \
             > "$out/probe-8.json" 2> "$out/probe-8.err" ;;
    triton) # a Triton cache of its own: the other checks' Triton kernels are not in it
            TRITON_CACHE_DIR=/tmp/sgl-ws/triton-only $py tests/device/kit_oracle.py $triton_configs \
              > "$out/triton-cold.json" 2> "$out/triton-cold.err"
            step triton-cold $? "$(( $(date +%s) - t0 ))"; t0=$(date +%s)
            find /tmp/sgl-ws/triton-only -type f | sort > "$out/triton-cache-after-cold.txt"
            find "$SGLANG_JIT_CACHE_DIR" -name '*.so' | sort > "$out/sglang-jit-after-cold.txt"
            TRITON_CACHE_DIR=/tmp/sgl-ws/triton-only $py tests/device/kit_oracle.py $triton_configs \
              > "$out/triton-warm.json" 2> "$out/triton-warm.err" ;;
  esac
  rc=$?; name=$1; [ "$name" = triton ] && name=triton-warm; [ "$name" = probe ] && name=probe-8
  step "$name" $rc $(( $(date +%s) - t0 ))
}
case " ${CHECKS:-backend} " in *" triton "*) run_check triton ;; esac
# the derivation and warm-up over the configurations whose attention is not Triton's (Triton's asks FlashInfer for
# sampling only); those are planned on their own (plan-triton.out), so a failure there stops nothing else
[ -n "$other_configs" ] || { touch "$out/done"; exit 0; }  # Triton's configurations only: nothing to derive or warm
# the venv side as the inferops role installs it: beside the planner it imports
side_dir=$(mktemp -d)
cp roles/inferops/files/inferops_flashinfer_venv.py plugins/module_utils/inferops_sglang_plan.py "$side_dir"/
side=$side_dir/inferops_flashinfer_venv.py
request() { $py -c 'import json, sys; print(json.dumps({"modules": [], "derive": True, "sglang_configs": sys.argv[1:]}))' "$@"; }
# shellcheck disable=SC2086
request=$(request $other_configs)
if [ -n "$triton_configs" ]; then
  t0=$(date +%s)
  # shellcheck disable=SC2086
  $py "$side" plan "$(request $triton_configs)" > "$out/plan-triton.out" 2> "$out/plan-triton.err"; step plan-triton $? $(( $(date +%s) - t0 ))
fi
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits > "$out/gpu-memory-before.txt"
t0=$(date +%s)
$py "$side" plan "$request" > "$out/plan.out" 2> "$out/plan.err" & pid=$!
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
$py "$side" warm "$request" > "$out/warm.out" 2> "$out/warm.err"; step warm $? $(( $(date +%s) - t0 ))
for check in ${CHECKS:-backend}; do
  [ "$check" = triton ] || run_check "$check"
done
ls -R /tmp/sgl-ws/triton /tmp/sgl-ws/sglang > "$out/other-caches.txt" 2>&1
touch "$out/done"
