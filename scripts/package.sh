#!/usr/bin/env bash
# Makes the relocatable release bundle libacc-<version>-linux-x86_64-<cpu|cuda>.tar.gz from the existing build
# outputs in build/ (it never builds: run scripts/setup.sh and `meson compile -C build` first).
#
#   bash scripts/package.sh [--flavor auto|cpu|cuda] [OUTDIR]      (OUTDIR defaults to out/package)
#
# The bundle: bin/acc, libexec/acc/acc-selftest (what `acc test` launches), lib/ (libacc, libacc_torch, the CUDA
# plugin in a cuda bundle, and every shared library they need that a user's machine may lack: LibTorch's, the
# CUDA runtime pieces libtorch_cpu.so links, libgomp, yaml-cpp, protobuf-lite), include/ (acc.h, torch.hpp
# and LibTorch's headers for the C++ API), lib/pkgconfig/{acc,acc-torch}.pc with a ${pcfiledir}-relative prefix,
# share/licenses/ and a README. Every ELF file's RUNPATH is $ORIGIN-relative (patchelf), so the directory works
# wherever it is unpacked. The libraries to bundle are found by ldd on the built ones: everything they load
# except glibc, libstdc++ and libgcc_s (which every Linux distribution has; see the README's requirements).
#
# --flavor auto (the default) makes a cuda bundle when build/src/libacc_cuda.so was built and every library it
# needs (libtorch_cuda.so, cuDNN, cuBLAS, NCCL, ...) resolves on this machine, otherwise a cpu bundle. The output
# also gets <tarball>.sha256. Prints the tarball's path as its last line.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${ACC_BUILD_DIR:-$root/build}

flavor=${ACC_PACKAGE_FLAVOR:-auto}
outdir=""
while (($#)); do
  case $1 in
    --flavor) flavor=${2:?--flavor needs auto, cpu or cuda}; shift 2 ;;
    --flavor=*) flavor=${1#--flavor=}; shift ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "package.sh: unknown option $1" >&2; exit 2 ;;
    *) [[ -z $outdir ]] || { echo "package.sh: one OUTDIR only" >&2; exit 2; }; outdir=$1; shift ;;
  esac
done
case $flavor in auto|cpu|cuda) ;; *) echo "package.sh: --flavor must be auto, cpu or cuda" >&2; exit 2 ;; esac
outdir=${outdir:-$root/out/package}
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)

for tool in patchelf readelf ldd objdump tar gzip; do
  command -v "$tool" >/dev/null || { echo "package.sh: $tool not found (patchelf: apt-get install patchelf, or bash scripts/setup.sh)" >&2; exit 1; }
done

# The build outputs, as they are (stale or not: this script packages, it does not build).
libacc_real=$(readlink -f "$build/src/libacc.so.1" 2>/dev/null || true)
libacc_torch_link=$(ls "$build"/src/libacc_torch.so.[0-9]*[0-9] 2>/dev/null | head -1 || true)
acc_bin=$build/launcher/acc
selftest=$build/launcher/selftest/acc-selftest
plugin=$build/src/libacc_cuda.so
jni=$build/bindings/libacc_jni.so
for f in "$libacc_real" "$libacc_torch_link" "$acc_bin" "$selftest"; do
  [[ -n $f && -f $f ]] || { echo "package.sh: missing build output ${f:-libacc/libacc_torch} in $build (build with meson -Dcore=true first)" >&2; exit 1; }
done

version=$(meson introspect "$build" --projectinfo 2>/dev/null |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])' 2>/dev/null || true)
[[ -n $version ]] || version=$(sed -n "s/^ *version: *'\([^']*\)'.*/\1/p" "$root/meson.build" | head -1)
[[ -n $version ]] || { echo "package.sh: cannot read the project version" >&2; exit 1; }

# Libraries every Linux distribution has (glibc, the GCC C++ runtime) and the NVIDIA driver's: never bundled.
is_system() {
  case $1 in
    linux-vdso.so.*|ld-linux*.so.*|libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|libutil.so.*) return 0 ;;
    libresolv.so.*|libstdc++.so.*|libgcc_s.so.*|libcuda.so*|libnvidia-*) return 0 ;;
  esac
  return 1
}

# ldd's view of what a file loads: "soname path" lines; "soname not found" for the unresolved.
deps_of() {
  ldd "$1" | awk '/=>/ { if ($3 == "not") print $1, "NOTFOUND"; else print $1, $3 }'
}

if [[ $flavor != cpu ]]; then
  if [[ ! -f $plugin ]]; then
    [[ $flavor == cuda ]] && { echo "package.sh: --flavor cuda but $plugin was not built" >&2; exit 1; }
    flavor=cpu
  else
    missing=$(deps_of "$plugin" | awk '$2 == "NOTFOUND" { print $1 }' | sort | paste -sd' ')
    if [[ -n $missing ]]; then
      [[ $flavor == cuda ]] && { echo "package.sh: --flavor cuda but the CUDA plugin's libraries are missing: $missing" >&2; exit 1; }
      echo "package.sh: $plugin was built, but the libraries it needs are not on this machine ($missing);" \
           "making a cpu bundle (ACC_SETUP_CUDA_RUNTIME=1 bash scripts/setup.sh installs them)" >&2
      flavor=cpu
    else
      flavor=cuda
    fi
  fi
fi

name=libacc-$version-linux-x86_64-$flavor
tarball=$outdir/$name.tar.gz
stage_root=$(mktemp -d "$outdir/.stage.XXXXXX")
tmp_tar=$outdir/.$name.tar.gz.tmp
trap 'rm -rf "$stage_root" "$tmp_tar"' EXIT
stage=$stage_root/$name
mkdir -p "$stage"/{bin,lib/pkgconfig,libexec/acc,include/acc,share/licenses}
echo "package.sh: $name from $build"

# Our own files. libacc keeps its soname links (libacc.so -> libacc.so.1 -> libacc.so.X.Y.Z).
cp "$libacc_real" "$stage/lib/"
real_base=$(basename "$libacc_real")
ln -s "$real_base" "$stage/lib/libacc.so.1"
ln -s libacc.so.1 "$stage/lib/libacc.so"
torch_real=$(readlink -f "$libacc_torch_link")
torch_soname=$(readelf -d "$torch_real" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
cp "$torch_real" "$stage/lib/$torch_soname"
ln -s "$torch_soname" "$stage/lib/libacc_torch.so"
cp "$acc_bin" "$stage/bin/acc"
cp "$selftest" "$stage/libexec/acc/acc-selftest"
# The text library libacc.so loads on first use (tokenizers, chat templates: src/text/text_loader.cpp).
text_lib=$build/src/libacc_text.so
[[ -f $text_lib ]] || { echo "package.sh: $text_lib was not built (ninja -C $build src/libacc_text.so)" >&2; exit 1; }
cp "$text_lib" "$stage/lib/libacc_text.so"
# ... and the data-file library it loads the same way (JSON lines, CSV, Parquet, Arrow: src/data/files/data_loader.cpp).
data_lib=$build/src/libacc_data.so
[[ -f $data_lib ]] || { echo "package.sh: $data_lib was not built (ninja -C $build src/libacc_data.so)" >&2; exit 1; }
cp "$data_lib" "$stage/lib/libacc_data.so"
roots=("$libacc_real" "$torch_real" "$acc_bin" "$selftest" "$text_lib" "$data_lib")
if [[ $flavor == cuda ]]; then
  cp "$plugin" "$stage/lib/libacc_cuda.so"
  roots+=("$plugin")
fi
if [[ -f $jni ]]; then
  cp "$jni" "$stage/lib/libacc_jni.so"
else
  echo "package.sh: $jni was not built (no JDK when meson configured?): the bundle has no Java support" >&2
fi

# Everything they load, transitively (ldd resolves through the build's RUNPATHs), but the system's.
declare -A bundled=()   # soname -> source path
for r in "${roots[@]}"; do
  while read -r so path; do
    [[ $path == NOTFOUND ]] && { echo "package.sh: $r needs $so, which is not found" >&2; exit 1; }
    is_system "$so" && continue
    case $so in libacc.so.*|libacc_torch.so.*|libacc_cuda.so|libacc_text.so|libacc_data.so) continue ;; esac
    bundled[$so]=$(readlink -f "$path")
  done < <(deps_of "$r")
done
for so in "${!bundled[@]}"; do
  cp "${bundled[$so]}" "$stage/lib/$so"
done
echo "package.sh: bundled ${#bundled[@]} libraries: $(printf '%s\n' "${!bundled[@]}" | sort | tr '\n' ' ')"

# RUNPATHs: $ORIGIN for lib/, relative to lib/ elsewhere. A library that has one (LibTorch's point into the wheel's
# site-packages) or needs a bundled library gets $ORIGIN; the others (yaml-cpp, ...) are left as they are.
chmod u+w "$stage"/lib/* "$stage/bin/acc" "$stage/libexec/acc/acc-selftest"
set_rpath() {  # file rpath
  # --force-rpath would keep DT_RPATH; DT_RUNPATH is what a modern linker writes, and every library is in lib/.
  nice -n 10 patchelf --set-rpath "$2" "$1"
}
for f in "$stage"/lib/*; do
  [[ -L $f || ! -f $f ]] && continue
  has=$(readelf -d "$f" | grep -cE '\((RPATH|RUNPATH)\)' || true)
  needs_ours=0
  while read -r so; do
    [[ -e $stage/lib/$so ]] && { needs_ours=1; break; }
  done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  if ((has || needs_ours)); then set_rpath "$f" '$ORIGIN'; fi
done
set_rpath "$stage/bin/acc" '$ORIGIN/../lib'
set_rpath "$stage/libexec/acc/acc-selftest" '$ORIGIN/../../lib'

# The Java binding: share/java/acc-<version>.jar (the ai.acc classes, and lib/libacc_jni.so packed inside for
# NativeLoader's fallback) and its pom, for `mvn install:install-file`. In the bundle, NativeLoader loads the
# bundle's lib/libacc_jni.so, found from the jar's own place.
if [[ -f $stage/lib/libacc_jni.so ]]; then
  if command -v mvn >/dev/null; then
    mkdir -p "$stage/share/java"
    mvn_args=(-B -q -Dstyle.color=never -f "$root/bindings/java/pom.xml" "-Dacc.build.dir=$stage_root/maven"
              "-Dacc.native.dir=$stage/lib" -DskipTests package)
    # Offline once ~/.m2 holds Maven's plugins (scripts/setup.sh fetches them); online otherwise.
    nice -n 10 mvn -o "${mvn_args[@]}" >"$stage_root/maven.log" 2>&1 || nice -n 10 mvn "${mvn_args[@]}" >>"$stage_root/maven.log" 2>&1 ||
      { cat "$stage_root/maven.log" >&2; echo "package.sh: mvn package of bindings/java failed" >&2; exit 1; }
    cp "$stage_root/maven/acc-$version.jar" "$stage/share/java/acc-$version.jar"
    cp "$root/bindings/java/pom.xml" "$stage/share/java/acc-$version.pom"
  else
    echo "package.sh: mvn not found: the bundle has lib/libacc_jni.so but no jar (bash scripts/setup.sh installs Maven)" >&2
  fi
fi

# Headers: the C API (acc.h) and the C++ API (torch.hpp), which includes LibTorch's headers: they are shipped
# (include/libtorch, about 63 MB, 7 MB compressed) so that acc-torch.pc works from the bundle alone, against the
# very LibTorch in lib/.
cp "$root/capi/include/acc/acc.h" "$root/capi/include/acc/torch.hpp" "$stage/include/acc/"
torch_libdir=$(dirname "${bundled[libtorch_cpu.so]:?libtorch_cpu.so was not among the bundled libraries}")
torch_include=""
for d in "$torch_libdir/../include" "$(dirname "$torch_libdir")/include"; do
  [[ -f $d/torch/csrc/api/include/torch/torch.h ]] && { torch_include=$(cd "$d" && pwd); break; }
done
[[ -n $torch_include ]] || { echo "package.sh: LibTorch's headers not found beside $torch_libdir" >&2; exit 1; }
cp -r "$torch_include" "$stage/include/libtorch"
cxx11_abi=$(sed -n 's/.*-D_GLIBCXX_USE_CXX11_ABI=\([01]\).*/\1/p' "$build/meson-private/acc-torch.pc" 2>/dev/null | head -1)
cxx11_abi=${cxx11_abi:-1}
torch_version=$(sed -n 's/.*tied to LibTorch \([^)]*\)).*/\1/p' "$build/meson-private/acc-torch.pc" 2>/dev/null | head -1)
torch_version=${torch_version:-unknown}

# pkg-config files, relocatable: the prefix is found from the .pc file's own directory. Libs carry an rpath to
# the bundle's lib/, so that a program built against it runs without LD_LIBRARY_PATH.
cat >"$stage/lib/pkgconfig/acc.pc" <<EOF
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: acc
Description: libacc: Hugging Face Accelerate as a C library
Version: $version
Libs: -L\${libdir} -lacc -Wl,-rpath,\${libdir}
Cflags: -I\${includedir}
EOF
cat >"$stage/lib/pkgconfig/acc-torch.pc" <<EOF
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include
torch_includedir=\${includedir}/libtorch

Name: acc-torch
Description: libacc C++ API: Accelerate for C++ programs with their own torch::nn::Modules (tied to LibTorch $torch_version)
Version: $version
Libs: -L\${libdir} -lacc_torch -ltorch_cpu -lc10 -Wl,-rpath,\${libdir}
Cflags: -I\${includedir} -std=c++20 -D_GLIBCXX_USE_CXX11_ABI=$cxx11_abi -isystem \${torch_includedir} -isystem \${torch_includedir}/torch/csrc/api/include
EOF

# Licences of everything bundled.
lic=$stage/share/licenses
mkdir -p "$lic/libacc"
if [[ -f $root/LICENSE ]]; then cp "$root/LICENSE" "$lic/libacc/LICENSE"
else cp /usr/share/common-licenses/Apache-2.0 "$lic/libacc/LICENSE"; fi
declare -A lic_done=()
for so in "${!bundled[@]}"; do
  src=${bundled[$so]}
  case $src in
    */site-packages/*)
      # A wheel's library: its dist-info's licence files (RECORD names the file).
      site=${src%%/site-packages/*}/site-packages
      rel=${src#"$site"/}
      rec=$(grep -l -F "$rel," "$site"/*.dist-info/RECORD 2>/dev/null | head -1 || true)
      [[ -n $rec ]] || { echo "package.sh: no wheel RECORD lists $rel (licence unknown)" >&2; exit 1; }
      dist=$(dirname "$rec")
      pkg=$(basename "$dist" .dist-info); pkg=${pkg%-*}
      [[ -n ${lic_done[$pkg]:-} ]] && continue
      mkdir -p "$lic/$pkg"
      if [[ -d $dist/licenses ]]; then cp -r "$dist/licenses/." "$lic/$pkg/"; fi
      for f in "$dist"/*; do
        [[ -f $f ]] && [[ $(basename "$f") =~ ^(LICEN[CS]E|NOTICE|COPYING) ]] && cp "$f" "$lic/$pkg/"
      done
      if [[ -z $(ls -A "$lic/$pkg") ]]; then
        # Some wheels (NVIDIA's cusparseLt) ship no licence file, only METADATA's License field: keep that.
        grep -E '^(Name|Version|License|License-Expression|Home-page|Project-URL|Author):' "$dist/METADATA" \
          >"$lic/$pkg/LICENSE-from-METADATA" 2>/dev/null
        grep -qE '^License(-Expression)?:' "$lic/$pkg/LICENSE-from-METADATA" ||
          { echo "package.sh: $dist has no licence file and no License in its METADATA" >&2; exit 1; }
      fi
      lic_done[$pkg]=1
      if [[ $so == libgomp.so.* && -z ${lic_done[libgomp]:-} ]]; then
        # torch's libgomp is GCC's OpenMP runtime: GPL-3 with the GCC Runtime Library Exception.
        mkdir -p "$lic/libgomp"
        cp /usr/share/doc/libgomp1/copyright "$lic/libgomp/copyright" 2>/dev/null ||
          cp /usr/share/doc/libgcc-s1/copyright "$lic/libgomp/copyright"
        lic_done[libgomp]=1
      fi
      ;;
    *)
      # A Debian package's library: its copyright file.
      pkg=$(dpkg -S "$src" 2>/dev/null | head -1 | cut -d: -f1 || true)
      [[ -n $pkg ]] || pkg=$(dpkg -S "${src#/usr}" 2>/dev/null | head -1 | cut -d: -f1 || true)
      [[ -n $pkg && -f /usr/share/doc/$pkg/copyright ]] || { echo "package.sh: no Debian copyright file for $src" >&2; exit 1; }
      [[ -n ${lic_done[$pkg]:-} ]] && continue
      mkdir -p "$lic/$pkg"
      cp "/usr/share/doc/$pkg/copyright" "$lic/$pkg/copyright"
      lic_done[$pkg]=1
      ;;
  esac
done
[[ -n ${lic_done[libgomp]:-} || ! -e $stage/lib/libgomp.so.1 ]] || {
  mkdir -p "$lic/libgomp"; cp /usr/share/doc/libgomp1/copyright "$lic/libgomp/copyright"; }
# The Rust crates compiled into libacc_text.so and libacc_data.so (Cargo.lock's): each one's licence files, from
# cargo's sources (scripts/setup.sh fetched them), in share/licenses/rust-crates/NAME-VERSION.
for manifest in "$root/src/text/rust/Cargo.toml" "$root/src/data/files/rust/Cargo.toml"; do
  "${CARGO:-cargo}" metadata --offline --locked --format-version 1 --manifest-path "$manifest" \
    --filter-platform "$(rustc -vV | sed -n 's/^host: //p')" |
    python3 -c 'import json, os, sys
for p in json.load(sys.stdin)["packages"]:
    if p["source"]:
        print(p["name"] + "-" + p["version"], os.path.dirname(p["manifest_path"]), p.get("license") or "unknown")' |
    while read -r crate dir license; do
      dest=$lic/rust-crates/$crate
      [[ -d $dest ]] && continue
      mkdir -p "$dest"
      for f in "$dir"/*; do
        [[ -f $f ]] && [[ $(basename "$f") =~ ^(LICEN[CS]E|NOTICE|COPYING|COPYRIGHT) ]] && cp "$f" "$dest/"
      done
      # A crate that ships no licence file: its Cargo.toml's licence expression.
      [[ -n $(ls -A "$dest") ]] || echo "$license (Cargo.toml's license field)" >"$dest/LICENSE-from-Cargo.toml"
    done
  [[ ${PIPESTATUS[0]} == 0 ]] || { echo "package.sh: cargo metadata failed for $manifest" >&2; exit 1; }
done

# What the bundle asks of the machine: the newest glibc and libstdc++ symbol versions any file in it uses.
max_ver() {  # prefix
  for f in "$stage"/lib/* "$stage/bin/acc" "$stage/libexec/acc/acc-selftest"; do
    [[ -L $f || ! -f $f ]] || objdump -T "$f" 2>/dev/null
  done | grep -o "$1[0-9.]*[0-9]" | sort -uV | tail -1
}
glibc=$(max_ver 'GLIBC_'); glibcxx=$(max_ver 'GLIBCXX_')
git_rev=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
lib_list=$(cd "$stage/lib" && for f in *; do
  if [[ -L $f ]]; then echo "  lib/$f -> $(readlink "$f")"; elif [[ -f $f ]]; then echo "  lib/$f"; fi; done)
lic_list=$(cd "$lic" && ls | sed 's/^/  share\/licenses\//')
if [[ $flavor == cuda ]]; then
  flavor_text="a CUDA bundle: lib/libacc_cuda.so (the NCCL plugin) and the CUDA libraries it loads are included;
libacc trains on cuda:<local rank> where an NVIDIA driver and a device are present, and on the CPU otherwise."
else
  flavor_text="a CPU bundle: the CUDA plugin (libacc_cuda.so) is not
included, so libacc trains on the CPU (Gloo). libtorch_cpu.so itself links two small CUDA runtime libraries
(libcudart, libcupti): they are bundled and need no GPU or driver."
fi

title="libacc $version for Linux x86_64 ($flavor)"
cat >"$stage/README" <<EOF
$title
$(printf '%*s' ${#title} '' | tr ' ' '=')

libacc is Hugging Face Accelerate as a native library: one training loop that runs unchanged on one CPU,
many processes, GPUs and machines, behind a stable C ABI (include/acc/acc.h); the acc command launches
and supervises the processes. This is $flavor_text

Built from git $git_rev against LibTorch $torch_version.

Relocatable: unpack it anywhere. Every program and library here finds its libraries through a RUNPATH
relative to itself (\$ORIGIN); nothing needs LD_LIBRARY_PATH or a particular install prefix.

What is inside
--------------
  bin/acc                      the launcher: acc launch, config, env, test, estimate-memory, merge-weights
  libexec/acc/acc-selftest     the program acc test launches
  include/acc/acc.h            the C API (the stable ABI: soname libacc.so.1)
  include/acc/torch.hpp        the C++ API (for programs with their own torch::nn::Module; tied to this LibTorch)
  include/libtorch/            LibTorch $torch_version's headers, which torch.hpp includes
  lib/pkgconfig/acc.pc         pkg-config for the C API
  lib/pkgconfig/acc-torch.pc   pkg-config for the C++ API
  share/java/acc-$version.jar     the Java binding (ai.acc), with its pom (acc-$version.pom)
  share/licenses/              the licences of libacc and of every bundled library
$lib_list

The third-party libraries in lib/ are bundled so that the directory works on any distribution: LibTorch's
(libtorch_cpu, libc10, the libgomp it ships, and the CUDA runtime pieces libtorch_cpu.so links), and the
Debian 12 builds of yaml-cpp and protobuf-lite that libacc and acc link. They are private to libacc:
nothing outside this directory loads them unless it links against lib/ itself.

Requirements
------------
Linux x86_64 with glibc >= ${glibc#GLIBC_} and the GCC C++ runtime (libstdc++.so.6 providing ${glibcxx:-GLIBCXX},
libgcc_s.so.1), as for example Debian 12, Ubuntu 22.04 and RHEL 9 have. Only these, and the rest of glibc,
come from the system.

Use from C (pkg-config)
-----------------------
  export PKG_CONFIG_PATH=/path/to/$name/lib/pkgconfig
  cc -o train train.c \$(pkg-config --cflags --libs acc)
  /path/to/$name/bin/acc launch --num_processes 2 ./train

The prefix in the .pc files is \${pcfiledir}/../.., so they are right wherever the bundle is. Their Libs
add an rpath to this lib/ directory, so the program runs without LD_LIBRARY_PATH (leave it out with
--libs-only-L --libs-only-l and set LD_LIBRARY_PATH instead if you move the bundle after linking).
Without pkg-config: -I<bundle>/include -L<bundle>/lib -lacc -Wl,-rpath,<bundle>/lib.

The C API needs only include/acc/acc.h and lib/libacc.so.1; the C ABI is stable across 1.x releases.

Use from C++ (acc/torch.hpp)
----------------------------
The C++ API is tied to the LibTorch it was built with ($torch_version, C++20, _GLIBCXX_USE_CXX11_ABI=$cxx11_abi).
Its headers (include/libtorch) and libraries (lib/libtorch_cpu.so, lib/libc10.so) are in this bundle, so
  c++ -o train_custom train_custom.cpp \$(pkg-config --cflags --libs acc-torch)
works as is. Do not mix in another LibTorch: a program that uses the C++ API must use this one.

Use from Rust, Go and Java
--------------------------
The bindings' sources are in the repository (bindings/rust, bindings/go, bindings/java); each finds this
bundle as follows.
  Rust (crates acc-sys and acc): PKG_CONFIG_PATH=<bundle>/lib/pkgconfig cargo build (or ACC_LIB_DIR=<bundle>/lib);
        run with LD_LIBRARY_PATH=<bundle>/lib (cargo does not pass a dependency's rpath on).
  Go (module github.com/libacc/libacc/bindings/go, tag bindings/go/v$version): PKG_CONFIG_PATH=<bundle>/lib/pkgconfig
        go build; cgo's pkg-config directive takes acc.pc's rpath, so the program runs as it is.
  Java (ai.acc:acc:$version): java -cp <bundle>/share/java/acc-$version.jar:... uses the bundle's lib/libacc_jni.so.
        Into a local Maven repository:
          mvn install:install-file -Dfile=<bundle>/share/java/acc-$version.jar -DpomFile=<bundle>/share/java/acc-$version.pom
        and a jar from there finds the bundle through ACC_HOME=<bundle> (or -Dai.acc.home=<bundle>).

acc launch
----------
  bin/acc launch --cpu --num_processes 2 ./train ARGS...     2 processes on this machine (Gloo on the CPU)
  bin/acc config                                             write a default config (like accelerate config)
  bin/acc env                                                versions and platform, for bug reports
  bin/acc test                                               launches acc-selftest: rendezvous, all-reduce, DDP step
acc takes Accelerate's launch options (--num_machines, --machine_rank, --main_process_ip, --config_file, ...);
bin/acc launch --help lists them. Documentation: docs/ in the source repository (launcher.md, c-api.md).

Licences
--------
libacc is licensed under the Apache License 2.0. The bundled libraries keep their own licences:
$lic_list
EOF

# The tarball: a single top directory named like the file. Ownership and times are normalized.
nice -n 10 tar -C "$stage_root" --owner=0 --group=0 --numeric-owner --sort=name -cf - "$name" |
  nice -n 10 gzip -6 >"$tmp_tar"
mv "$tmp_tar" "$tarball"
(cd "$outdir" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
size=$(du -m "$tarball" | cut -f1)
echo "package.sh: wrote $tarball (${size} MB; sha256 in $name.tar.gz.sha256)"
echo "$tarball"
