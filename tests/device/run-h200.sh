#!/bin/sh
# Run the collection on a lent GPU host (the device tool's machine) and put the logs in $OUT.
# Carry .whl/ (ansible-core and its missing dependencies, FlashInfer 0.6.18, apache-tvm-ffi): see tests/device/README.md.
set -u
# PHASE=start: copy the repository to /tmp/h200-repo and run this script there in the background (its own session,
# so it outlives the device tool's command), results in /tmp/h200-run; PHASE=collect: wait up to 9 minutes for it and
# copy the results into $OUT (call again while it says "still running"). The compiles can outlast one command.
case "${PHASE:-all}" in
  start)
    rm -rf /tmp/h200-repo /tmp/h200-run && cp -a . /tmp/h200-repo && mkdir -p /tmp/h200-run || exit 1
    (cd /tmp/h200-repo && setsid env OUT=/tmp/h200-run PHASE=all sh tests/device/run-h200.sh </dev/null >/dev/null 2>&1 &)
    echo "started in the background: /tmp/h200-run"
    exit 0 ;;
  collect)
    waited=0
    while [ ! -f /tmp/h200-run/done ] && [ "$waited" -lt 540 ]; do sleep 10; waited=$((waited + 10)); done
    cp -a /tmp/h200-run/. "${OUT:?}/" 2>/dev/null
    if [ -f /tmp/h200-run/done ]; then cat /tmp/h200-run/summary.txt; exit 0; fi
    echo "still running after ${waited} s:"; tail -5 /tmp/h200-run/run.log; exit 3 ;;
esac
# shellcheck source=tests/device/common.sh
. tests/device/common.sh
# FlashInfer into the host's torch venv, as an operator's SGLang install would have it: its wheel, or (FlashInfer 0.7.2's
# 62 MB wheel does not fit the device tool's 64 MiB with the rest) the wheel's files xz-compressed, unpacked where pip
# would put them (a py3-none-any wheel: dist-info included).
if ls .whl/flashinfer_python-*.tar.xz >/dev/null 2>&1; then
  site=$(/opt/torch/.venv/bin/python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") || exit 1
  tar -C "$site" -xJf .whl/flashinfer_python-*.tar.xz || exit 1
  /opt/torch/.venv/bin/python3 -m pip install -q --no-index --no-deps .whl/apache_tvm_ffi-*.whl || exit 1
else
  /opt/torch/.venv/bin/python3 -m pip install -q --no-index --no-deps .whl/flashinfer_python-*.whl .whl/apache_tvm_ffi-*.whl || exit 1
fi
capture_host
play() {
  name="$1"; shift
  start=$(date +%s)
  python3 /tmp/site/bin/ansible-playbook -i tests/device/inventory.ini tests/device/site-h200.yml "$@" > "$out/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc seconds=$(( $(date +%s) - start ))" >> "$out/summary.txt"
}
gather_facts
play first-run --diff
play second-run
cp tests/device/sampling_check.py /tmp/sampling_check.py && chmod 644 /tmp/sampling_check.py
# The environment file's variables, one argument each (values may hold spaces), as a unit would get them.
set -- HOME=/var/lib/sglang
while IFS= read -r line; do
  case "$line" in ''|'#'*) ;; *) set -- "$@" "$(printf '%s' "$line" | sed "s/='\(.*\)'\$/=\1/")" ;; esac
done < /etc/inferops/cuda.env
runuser -u sglang -- env -i "$@" /opt/torch/.venv/bin/python3 /tmp/sampling_check.py > "$out/sampling.json" 2> "$out/sampling.err"
sampling_rc=$?
cp tests/device/attention_check.py /tmp/attention_check.py && chmod 644 /tmp/attention_check.py
# Anything compiled or linked at run time fails the check (attention_check.py watches the cache's objects).
runuser -u sglang -- env -i "$@" /opt/torch/.venv/bin/python3 /tmp/attention_check.py > "$out/attention.json" 2> "$out/attention.err"
# Measured once more: FLASHINFER_DISABLE_JIT=1 on the warm cache (FlashInfer 0.6.18 loads only AOT modules then).
runuser -u sglang -- env -i "$@" FLASHINFER_DISABLE_JIT=1 /opt/torch/.venv/bin/python3 /tmp/attention_check.py > "$out/attention-disable-jit.json" 2>/dev/null
attention_rc=$?
{
  echo "sampling rc=$sampling_rc"
  echo "attention rc=$attention_rc"
  runuser -u sglang -- /usr/local/sbin/inferops-flashinfer check 2>&1
  find /var/lib/sglang/.cache/flashinfer -name '*.so' -printf '%p %s\n'
} >> "$out/summary.txt"
# The device tool returns 8 files: the small ones travel in one archive.
tar -C "$out" -cf "$out/small.tar" summary.txt sampling.json sampling.err attention.json attention.err attention-disable-jit.json \
  compare.txt gpu_facts.json && \
  rm "$out/sampling.json" "$out/sampling.err" "$out/attention.json" "$out/attention.err" "$out/attention-disable-jit.json" \
  "$out/compare.txt" "$out/gpu_facts.json"
cat "$out/summary.txt"
touch "$out/done"
