# Sourced by the GPU scripts: the prebuilt binaries' environment on a GPU machine without the
# project's build deps. Sets `bin` (the carry, BIN or build-gpu-carry/, unpacked first from
# build-gpu-carry.tar.xz — scripts/gpu/prebuild.sh PACK=… — when only the archive is there) and
# LD_LIBRARY_PATH: the carried libraries, then cuBLAS 13 and NCCL from the toolkit or from the
# wheels PyTorch installs (nvidia-cublas, nvidia-nccl) where the system has none.
# Usage: root=REPO; . "$root/scripts/gpu/carry_env.sh"
bin=${BIN:-$root/build-gpu-carry}
if [ ! -x "$bin/test_cuda" ] && [ -f "${CARRY_ARCHIVE:-$root/build-gpu-carry.tar.xz}" ]; then
  tar -C "$(dirname "$bin")" -xJf "${CARRY_ARCHIVE:-$root/build-gpu-carry.tar.xz}"
fi
[ -d "$bin/lib" ] && export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
carry_wheel_lib() {  # the lib/ of an nvidia.* wheel, or nothing
  python3 -c "import nvidia.$1, os; print(os.path.join(list(nvidia.$1.__path__)[0], 'lib'))" 2>/dev/null
}
for want in "libcublas.so.13 cublas" "libnccl.so.2 nccl"; do
  read -r carry_so carry_wheel <<<"$want"
  if [ -x "$bin/test_cuda" ] && ldd "$bin/test_cuda" | grep -q "$carry_so => not found"; then
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib "$(carry_wheel_lib "$carry_wheel")"; do
      if [ -n "$d" ] && [ -e "$d/$carry_so" ]; then export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d; break; fi
    done
  fi
done
