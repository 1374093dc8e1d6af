#!/usr/bin/env bash
# Builds here what the H200 check (bench/gpu/h200_check.sh) runs, and packs it for the device
# tool, whose machine has the NVIDIA driver, nvcc and CMake but none of Debian's libraries:
#   bin/  tessera, tessera-bench, conformance, unit_gpu (-O2 as CI builds, sm_90a, stripped)
#   lib/  every shared library they load, except glibc's own (ldd)
# as device-transfer/1/pack.txz, and SmolLM2-135M Q4_1 (98 MB) in two parts, since one call
# carries 64 MiB at most: device-transfer/1 (pack + part 0, ~58 MB), device-transfer/2 (part 1).
# Usage: bash bench/gpu/pack.sh         (then see h200_check.sh for the two device calls)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build-device"
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
# oneDNN (40 MB) and XGrammar stay out: nothing the check runs needs them on a GPU device.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_WERROR=ON -DTESSERA_CUDA=ON \
  -DTESSERA_CUDA_ARCHS=90a -DTESSERA_HIP=OFF -DTESSERA_XGRAMMAR=OFF -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON \
  -DPython3_EXECUTABLE="$root/.venv/bin/python" >/dev/null
cmake --build "$build" -j "$(nproc)" --target tessera_cli tessera_bench conformance unit_gpu
pack="$root/device-pack"
rm -rf "$pack" && mkdir -p "$pack/bin" "$pack/lib"
for b in tessera tessera-bench conformance unit_gpu; do
  cp "$build/bin/$b" "$pack/bin/" && strip "$pack/bin/$b"
done
for lib in $(ldd "$pack"/bin/* | awk '/=> \// {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*) ;;  # the machine's own
    *) cp -L "$lib" "$pack/lib/" ;;
  esac
done
model="$root/models-cache/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$model" ] || "$root/.ci/fetch-model"
xfer="$root/device-transfer"
rm -rf "$xfer" && mkdir -p "$xfer/1" "$xfer/2"
tar cJf "$xfer/1/pack.txz" -C "$pack" .
head -c 45M "$model" >"$xfer/1/smollm2.part00"
tail -c +$((45 * 1024 * 1024 + 1)) "$model" >"$xfer/2/smollm2.part01"
sha256sum "$model" | cut -d' ' -f1 >"$xfer/1/smollm2.sha256"
du -sh "$xfer/1" "$xfer/2"
