#!/usr/bin/env bash
# The release bundle works outside the checkout (issue 13): scripts/package.sh makes it (or $ACC_BUNDLE names a
# tarball made before), it is unpacked into a fresh temporary directory, and there, with the checkout hidden
# (a private mount namespace lays an empty tmpfs over it, where unshare is allowed; otherwise ldd's view is
# checked instead) and a clean environment (no LD_LIBRARY_PATH), it
#   - has no ELF file whose RUNPATH/RPATH leaves $ORIGIN (readelf -d), nor a .pc naming the checkout,
#   - loads its libraries only from itself and the system's directories (ldd),
#   - builds examples/c/train_mlp.c with `cc $(pkg-config --cflags --libs acc)` and runs it with
#     `bin/acc launch --cpu --num_processes 2`,
#   - builds examples/cpp/train_custom.cpp with pkg-config acc-torch and runs it on 2 processes
#     (ACC_PACKAGE_SKIP_CXX=1 skips this, the slowest step: about a minute of compiling),
#   - runs `bin/acc env` (which must find the bundle's libacc) and `bin/acc test` on 1 and 2 processes,
#   - runs each binding's tests against the bundle instead of the build tree, from a copy of its sources, and
#     consumes it as its ecosystem does: Rust `cargo package --workspace --no-verify` and `cargo test` (pkg-config
#     acc); Go `go test` and examples/go (a module requiring the binding) built with cgo pkg-config and
#     run under `acc launch -n 2`; Java JUnit with ACC_HOME, the bundle's jar installed into the local Maven
#     repository and examples/java built against it and run under `acc launch -n 2`, and the jar found beside
#     lib/libacc_jni.so (ACC_PACKAGE_SKIP_BINDINGS=1 skips these; a missing toolchain skips its language).
# Prints "N passed, N failed"; the exit status is non-zero on a failure.
#   ACC_BUNDLE=/path/to/libacc-...tar.gz  reuse a tarball instead of running scripts/package.sh
#   ACC_PACKAGE_KEEP=1                     keep the temporary directory (its path is printed)
set -uo pipefail
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
passed=0
failed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
finish() {
  echo "$passed passed, $failed failed"
  ((failed == 0))
  exit $?
}

# The temporary directory must lie outside the checkout, which is hidden below.
base=${TMPDIR:-/tmp}
case $(cd "$base" && pwd -P)/ in "$(cd "$root" && pwd -P)"/*) base=/tmp ;; esac
tmp=$(mktemp -d "$base/acc_package_test.XXXXXX")
if [[ ${ACC_PACKAGE_KEEP:-0} == 1 ]]; then echo "keeping $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi

# 1. The tarball.
if [[ -n ${ACC_BUNDLE:-} ]]; then
  tarball=$ACC_BUNDLE
  [[ -f $tarball ]] && ok "bundle given: $tarball" || { fail "ACC_BUNDLE=$tarball does not exist"; finish; }
else
  start=$SECONDS
  if log=$(bash "$root/scripts/package.sh" "$tmp/dist" 2>&1); then
    tarball=$(tail -1 <<<"$log")
    ok "scripts/package.sh made $(basename "$tarball") ($(du -m "$tarball" | cut -f1) MB) in $((SECONDS - start)) s"
  else
    echo "$log"
    fail "scripts/package.sh failed"
    finish
  fi
fi
name=$(basename "$tarball" .tar.gz)
[[ $name =~ ^libacc-[0-9]+\.[0-9]+\.[0-9]+.*-linux-x86_64-(cpu|cuda)$ ]] && ok "name $name" ||
  fail "tarball name $name is not libacc-<version>-linux-x86_64-<cpu|cuda>.tar.gz"

# 2. Unpacked into a fresh directory.
mkdir -p "$tmp/unpacked"
if nice -n 10 tar -C "$tmp/unpacked" -xzf "$tarball"; then ok "unpacked"; else fail "tar -xzf"; finish; fi
B=$tmp/unpacked/$name
[[ -d $B ]] || { fail "the tarball has no top directory $name"; finish; }
missing=""
for f in bin/acc libexec/acc/acc-selftest lib/libacc.so lib/libacc.so.1 lib/libacc_torch.so lib/libtorch_cpu.so \
         lib/libc10.so include/acc/acc.h include/acc/torch.hpp lib/pkgconfig/acc.pc lib/pkgconfig/acc-torch.pc \
         share/licenses/libacc/LICENSE README; do
  [[ -e $B/$f ]] || missing+=" $f"
done
[[ -z $missing ]] && ok "layout: bin, libexec, lib (soname links), include, pkgconfig, licences, README" ||
  fail "missing from the bundle:$missing"
[[ -L $B/lib/libacc.so && -L $B/lib/libacc.so.1 ]] && ok "libacc's soname links kept" || fail "lib/libacc.so* are not symlinks"
version=$(sed -n 's/^Version: *//p' "$B/lib/pkgconfig/acc.pc")
if command -v mvn >/dev/null && command -v javac >/dev/null; then
  jar=$B/share/java/acc-$version.jar
  # The listing read whole first: `unzip -l | grep -q` under pipefail fails when grep stops reading early and unzip
  # gets SIGPIPE, which a longer jar (more classes) makes likely.
  listing=$( [[ -f $jar ]] && unzip -l "$jar" )
  if [[ -f $B/lib/libacc_jni.so && -f $jar && -f $B/share/java/acc-$version.pom ]] &&
     grep -q ' ai/acc/native/linux-x86_64/libacc_jni.so$' <<<"$listing" && grep -q ' ai/acc/Accelerator.class$' <<<"$listing"; then
    ok "Java: lib/libacc_jni.so, share/java/acc-$version.jar (ai.acc classes and the JNI library) and its pom"
  else
    fail "Java: lib/libacc_jni.so, share/java/acc-$version.{jar,pom} or the jar's ai.acc classes and JNI library are missing"
  fi
fi
[[ $name != *-cuda || -f $B/lib/libacc_cuda.so ]] && [[ $name != *-cpu || ! -e $B/lib/libacc_cuda.so ]] &&
  ok "flavor matches the CUDA plugin's presence" || fail "a -cuda bundle lacks libacc_cuda.so, or a -cpu one has it"
unwanted=$(cd "$B/lib" && ls | grep -E '^lib(torch_python|torch_cuda|c10_cuda|torch\.so$)' || true)
[[ $name == *-cuda || -z $unwanted ]] && ok "cpu bundle holds no torch_python/CUDA LibTorch libraries" ||
  fail "cpu bundle holds $unwanted"

# 3. RUNPATH/RPATH: only $ORIGIN-relative entries that stay inside the bundle.
bad=""
nelf=0
while IFS= read -r f; do
  readelf -h "$f" >/dev/null 2>&1 || continue
  nelf=$((nelf + 1))
  rel=${f#"$B"/}
  depth=$(($(tr -cd / <<<"$rel" | wc -c)))  # directories between the bundle's root and the file
  while IFS= read -r p; do
    [[ -z $p ]] && continue
    if [[ $p != '$ORIGIN' && $p != '$ORIGIN/'* ]]; then bad+=" $rel:$p"; continue; fi
    ups=$(grep -o '\.\./' <<<"${p#\$ORIGIN}" | wc -l)
    ((ups <= depth)) || bad+=" $rel:$p(leaves the bundle)"
  done < <(readelf -d "$f" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p' | tr ':' '\n')
done < <(find "$B" -type f -not -path "$B/include/*" -not -path "$B/share/*")
((nelf >= 5)) || fail "only $nelf ELF files found"
[[ -z $bad ]] && ok "$nelf ELF files: every RUNPATH/RPATH is \$ORIGIN-relative and inside the bundle" ||
  fail "RUNPATH/RPATH outside \$ORIGIN:$bad"
if grep -rlF -e "$root" "$B/lib/pkgconfig" "$B/README" >/dev/null 2>&1; then
  fail "the .pc files or the README name the checkout $root"
else
  ok "no .pc file or README names the checkout"
fi

# 4. What the libraries load: only the bundle and the system's directories.
outside=""
plugin=()
[[ -f $B/lib/libacc_cuda.so ]] && plugin=("$B/lib/libacc_cuda.so")
for f in "$B/lib/libacc.so.1" "$B/lib/libacc_torch.so" "$B/bin/acc" "$B/libexec/acc/acc-selftest" "${plugin[@]}"; do
  while read -r so path; do
    case $path in
      "$B"/*|/lib/*|/lib64/*|/usr/lib/*|/usr/lib64/*) ;;
      *) outside+=" ${f#"$B"/}:$so=>$path" ;;
    esac
  done < <(env -i PATH=/usr/bin:/bin ldd "$f" | awk '/=>/ { print $1, ($3 == "not" ? "NOT-FOUND" : $3) }')
done
[[ -z $outside ]] && ok "ldd: libacc, libacc_torch, acc, acc-selftest${plugin:+ and the CUDA plugin} load only from the bundle and /lib, /usr/lib" ||
  fail "ldd resolves outside the bundle:$outside"

# 5. Build and run, in a clean environment, from a directory outside the checkout, with the checkout hidden.
work=$tmp/work
mkdir -p "$work"
cp "$root/examples/c/train_mlp.c" "$root/examples/cpp/train_custom.cpp" "$work/"
# The bindings' sources and their examples, in the checkout's layout (examples/go's go.mod replaces the module
# with ../../bindings/go), without anything built in them, and the Hugging Face fixtures, tiny tokenizers and data
# files (tests/data/prep: their data_files scenario) their tests read.
mkdir -p "$work/src"
tar -C "$root" --exclude=target --exclude=native/lib -cf - \
  bindings/rust bindings/go bindings/java examples/go examples/java tests/hf/fixtures tests/text/tiny tests/data/prep |
  tar -C "$work/src" -xf -
cat >"$work/steps.sh" <<'EOF'
# Runs with the checkout hidden; each step prints "STEP ok|FAIL <what>", followed by its output on failure.
cd "$WORK" || exit 1
step() {  # what command...
  what=$1; shift
  if out=$("$@" 2>&1); then echo "STEP ok $what"; else echo "STEP FAIL $what (exit $?)"; echo "$out" | tail -30; fi
  printf '%s\n' "$out" >>"$WORK/steps.log"
}
if [ -n "$HIDDEN" ]; then
  if [ -e "$HIDDEN/meson.build" ] || [ -e "$HIDDEN/.venv" ]; then echo "STEP FAIL the checkout is not hidden"
  else echo "STEP ok the checkout $HIDDEN is hidden (empty tmpfs over it)"; fi
fi
step "cc \$(pkg-config --cflags --libs acc) examples/c/train_mlp.c" sh -c 'cc -std=c99 -o train_mlp train_mlp.c $(pkg-config --cflags --libs acc)'
step "pkg-config --modversion acc = $VERSION" sh -c '[ "$(pkg-config --modversion acc)" = "$VERSION" ]'
step "acc launch --cpu --num_processes 2 train_mlp" sh -c \
  '"$B/bin/acc" launch --cpu --num_processes 2 ./train_mlp mlp.safetensors 20 >mlp.out 2>&1 || { cat mlp.out; exit 1; }
   grep -q "final loss" mlp.out && grep -q "processes: 2" mlp.out && test -s mlp.safetensors || { cat mlp.out; exit 1; }'
if [ "${SKIP_CXX:-0}" != 1 ]; then
  step "c++ \$(pkg-config --cflags --libs acc-torch) examples/cpp/train_custom.cpp" sh -c \
    'nice -n 10 c++ -O1 -o train_custom train_custom.cpp $(pkg-config --cflags --libs acc-torch)'
  step "acc launch --cpu --num_processes 2 train_custom" sh -c \
    '"$B/bin/acc" launch --cpu --num_processes 2 ./train_custom --steps 5 --out custom >custom.out 2>&1 || { cat custom.out; exit 1; }
     test -s custom/model.safetensors || { cat custom.out; exit 1; }'
fi
step "acc env finds the bundle's libacc (its build info says \"cuda\": false in a cpu bundle, true in a cuda one)" sh -c \
  '"$B/bin/acc" env >env.out 2>&1 || { cat env.out; exit 1; }
   grep -q "libacc location: $B/lib/libacc.so" env.out && grep -q "libacc version: $VERSION" env.out &&
   if [ "$FLAVOR" = cpu ]; then want="\"cuda\": false, \"backends\": [\"gloo\"]"; else want="\"cuda\": true"; fi &&
   grep -qF "$want" env.out || { cat env.out; exit 1; }'
step "acc test (1 process)" sh -c '"$B/bin/acc" test --cpu >test1.out 2>&1 || { cat test1.out; exit 1; }'
step "acc test --num_processes 2" sh -c '"$B/bin/acc" test --cpu --num_processes 2 >test2.out 2>&1 || { cat test2.out; exit 1; }
   grep -q "success" test2.out || { cat test2.out; exit 1; }'
step "acc --version = $VERSION" sh -c '"$B/bin/acc" --version | grep -qF "$VERSION"'

# The bindings, against the bundle.
skip() { echo "skipped: $*"; }
if [ "${SKIP_BINDINGS:-0}" = 1 ]; then skip "the bindings (ACC_PACKAGE_SKIP_BINDINGS=1)"
else
  if command -v cargo >/dev/null; then
    export CARGO_TARGET_DIR="$WORK/cargo-target"
    step "rust: cargo package --workspace --no-verify (acc-sys, acc): no warning, metadata complete" sh -c \
      'cd src/bindings/rust && cargo package --workspace --no-verify --offline --allow-dirty >package.out 2>&1 &&
       ! grep -i warning package.out && test -s "$CARGO_TARGET_DIR/package/acc-sys-$VERSION.crate" &&
       test -s "$CARGO_TARGET_DIR/package/acc-$VERSION.crate" || { cat package.out; exit 1; }'
    step "rust: cargo test --workspace, acc-sys linked through the bundle's acc.pc" sh -c \
      'cd src/bindings/rust && LD_LIBRARY_PATH="$B/lib" cargo test --offline --workspace >test.out 2>&1 || { tail -40 test.out; exit 1; }
       grep -q "test result: ok" test.out && grep -qF "rustc-link-search=native=$B/lib" "$CARGO_TARGET_DIR"/debug/build/acc-sys-*/output ||
         { cat "$CARGO_TARGET_DIR"/debug/build/acc-sys-*/output; exit 1; }'
  else skip "rust (no cargo)"; fi
  if command -v go >/dev/null; then
    step "go: go test ./... (cgo pkg-config acc; acc.pc's rpath, no LD_LIBRARY_PATH)" sh -c \
      'cd src/bindings/go && go test -count=1 ./...'
    step "go: examples/go (requires github.com/libacc/libacc/bindings/go v$VERSION) under acc launch -n 2" sh -c \
      'cd src/examples/go && go build -o "$WORK/train_mlp_go" ./train_mlp && cd "$WORK" &&
       ldd train_mlp_go | grep -q "libacc.so.1 => $B/" &&
       "$B/bin/acc" launch --cpu --num_processes 2 ./train_mlp_go go.safetensors 20 >go.out 2>&1 &&
       grep -q "final loss" go.out && test -s go.safetensors || { ldd train_mlp_go; cat go.out; exit 1; }'
  else skip "go (no go)"; fi
  if command -v mvn >/dev/null && command -v javac >/dev/null; then
    mvn="mvn -o -B -q -Dstyle.color=never -Dmaven.repo.local=$M2"
    jar="$B/share/java/acc-$VERSION.jar"
    step "java: JUnit (mvn test) with ACC_HOME, loading the bundle's lib/libacc_jni.so" sh -c \
      'cd src/bindings/java && ACC_HOME="$B" $0 -Dacc.build.dir="$WORK/java-target" test >test.out 2>&1 || { tail -60 test.out; exit 1; }
       cat "$WORK"/java-target/surefire-reports/*.txt' "$mvn"
    step "java: share/java/acc-$VERSION.jar into the local Maven repository (install:install-file), examples/java built against it" sh -c \
      '$0 -f "${1%.jar}.pom" install:install-file -Dfile="$1" -DpomFile="${1%.jar}.pom" &&
       cd src/examples/java && $0 package' "$mvn" "$jar"
    step "java: acc launch -n 2 TrainMlp with the installed jar and ACC_HOME" sh -c \
      'ACC_HOME="$B" "$B/bin/acc" launch --cpu --num_processes 2 java -cp "$M2/ai/acc/acc/$VERSION/acc-$VERSION.jar:src/examples/java/target/classes" \
         ai.acc.examples.TrainMlp java.safetensors 20 >java.out 2>&1 && grep -q "final loss" java.out && test -s java.safetensors ||
         { cat java.out; exit 1; }'
    step "java: the bundle's jar finds lib/libacc_jni.so beside it (no ACC_HOME, nothing extracted from the jar)" sh -c \
      '"$B/bin/acc" launch --cpu --num_processes 1 java -cp "$1:src/examples/java/target/classes" ai.acc.examples.TrainMlp java1.safetensors 20 \
         >java1.out 2>&1 && grep -q "final loss" java1.out && ! test -e "$HOME/.cache/libacc" || { cat java1.out; ls -R "$HOME/.cache"; exit 1; }' \
      sh "$jar"
  else skip "java (no mvn or javac)"; fi
fi
EOF
tool_path=/usr/local/bin:/usr/bin:/bin
for t in cargo go; do
  command -v $t >/dev/null && tool_path+=:$(dirname "$(command -v $t)")
done
go_env=()
command -v go >/dev/null && go_env=(GOCACHE="$(go env GOCACHE)" GOPATH="$(go env GOPATH)" GOPROXY=off GOTOOLCHAIN=local)
clean_env=(env -i PATH="$tool_path" HOME="$work" CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
           "${go_env[@]}" M2="$HOME/.m2/repository" SKIP_BINDINGS="${ACC_PACKAGE_SKIP_BINDINGS:-0}" FLAVOR="${name##*-}" TMPDIR="$tmp" LANG=C.UTF-8 WORK="$work" B="$B"
           VERSION="$version" SKIP_CXX="${ACC_PACKAGE_SKIP_CXX:-0}" PKG_CONFIG_PATH="$B/lib/pkgconfig")
# Hide the checkout: an empty tmpfs over it, in a mount namespace of its own (needs root or user namespaces).
hide=""
if unshare -m true 2>/dev/null; then hide=(unshare -m); elif unshare -rm true 2>/dev/null; then hide=(unshare -rm); fi
if [[ -n $hide ]]; then
  out=$("${hide[@]}" sh -c 'mount -t tmpfs -o size=1m none "$1" && shift && exec "$@"' sh "$root" \
          "${clean_env[@]}" HIDDEN="$root" sh "$work/steps.sh" 2>&1)
else
  echo "note: unshare -m is not allowed here, so the checkout stays visible (the ldd and readelf checks stand in)"
  out=$("${clean_env[@]}" HIDDEN="" sh "$work/steps.sh" 2>&1)
fi
while IFS= read -r line; do
  case $line in
    "STEP ok "*) ok "${line#STEP ok }" ;;
    "STEP FAIL "*) fail "${line#STEP FAIL }" ;;
    *) echo "     $line" ;;
  esac
done <<<"$out"
grep -q "STEP" <<<"$out" || { echo "$out"; fail "the steps in the clean environment did not run"; }
finish
