#!/usr/bin/env bash
# libFuzzer runs of the parsers that read untrusted text (docs/fuzzing.md): the config library's JSON and YAML
# readers (library and launcher side), the safetensors header parser, `acc launch`'s argument parser, the
# checkpoint and Hugging Face model folders' JSON, and issue 36's surfaces: adapter_config.json and the regular
# expressions from files and callers (RE2), parallelism_config's sizes, profile_kwargs; and issue 37's tokenizer.json
# files, texts and chat templates (the Rust text library, src/text); issue 39's dataset files' metadata (Parquet
# footers and page headers, Arrow IPC messages and footers: the Rust data library, src/data/files).
#
#   scripts/fuzz.sh --smoke                 build, then run every target ~5 s (meson suite fuzz-smoke); exit 1 on a finding
#   scripts/fuzz.sh [SECONDS] [TARGET...]   long run: SECONDS (default 3600) split across the targets (all by default)
#   scripts/fuzz.sh --per-target SECONDS [TARGET...]      each target SECONDS
#   scripts/fuzz.sh ... -- -max_len=65536 -jobs=2         extra libFuzzer flags after --
#   scripts/fuzz.sh --list                  the targets
#
# Builds in build-fuzz/ (clang, ASan + UBSan, the libraries instrumented with -fsanitize=fuzzer-no-link, -Dcore=false:
# no LibTorch), configured on first use. Long runs keep what they find in build-fuzz/fuzz-corpus/<target>/ (seed it
# back into tests/fuzz/corpus by hand when worth it); crashes, timeouts, leaks and out-of-memory inputs go to
# build-fuzz/fuzz-findings/<target>/. Reproduce one with `build-fuzz/tests/fuzz/<target> FILE`.
# Needs Debian's clang and libfuzzer-14-dev (scripts/setup.sh installs them; this script runs it first).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bdir=${ACC_FUZZ_BUILD_DIR:-build-fuzz}
targets_all=(fuzz_accelerator_json fuzz_launch_yaml fuzz_launch_json fuzz_safetensors_header fuzz_launch_args
             fuzz_checkpoint_json fuzz_checkpoint_folder fuzz_hf_folder fuzz_adapter_config fuzz_param_pattern
             fuzz_parallelism_sizes fuzz_profile_kwargs fuzz_tokenizer fuzz_chat_template fuzz_parquet_footer
             fuzz_arrow_ipc)
declare -A dicts=([fuzz_accelerator_json]=json [fuzz_launch_json]=json [fuzz_safetensors_header]=json
                  [fuzz_launch_yaml]=yaml [fuzz_launch_args]=args [fuzz_checkpoint_json]=json
                  [fuzz_checkpoint_folder]=json [fuzz_hf_folder]=hf [fuzz_adapter_config]=adapter
                  [fuzz_param_pattern]=pattern [fuzz_parallelism_sizes]=parallelism [fuzz_profile_kwargs]=profile
                  [fuzz_tokenizer]=tokenizer [fuzz_chat_template]=jinja [fuzz_parquet_footer]=parquet
                  [fuzz_arrow_ipc]=arrow)

smoke=0 per_target=0 seconds=3600 targets=() extra=()
while (($#)); do
  case $1 in
    --smoke) smoke=1 ;;
    --per-target) per_target=1 ;;
    --list) printf '%s\n' "${targets_all[@]}"; exit 0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *[!0-9]*)
      [[ " ${targets_all[*]} " == *" $1 "* ]] || { echo "fuzz.sh: unknown target '$1' (--list)" >&2; exit 2; }
      targets+=("$1") ;;
    *) seconds=$1 ;;
  esac
  shift
done
((${#targets[@]})) || targets=("${targets_all[@]}")

# Toolchain: Debian 12's clang 14 and its libFuzzer, which scripts/setup.sh installs with everything else.
bash scripts/setup.sh >/dev/null

if [[ ! -f $bdir/build.ninja ]]; then
  echo "fuzz.sh: configuring $bdir (clang, ASan + UBSan, libFuzzer)"
  CC=clang CXX=clang++ meson setup "$bdir" -Dcore=false -Dfuzz=true -Dbuildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false -Dcargo_dir="$PWD/build" \
    -Dcpp_args=-fsanitize=fuzzer-no-link -Dc_args=-fsanitize=fuzzer-no-link >/dev/null
fi
start=$(date +%s)
meson compile -C "$bdir" "${targets[@]}" >/dev/null
echo "fuzz.sh: built ${#targets[@]} target(s) in $(( $(date +%s) - start )) s"

if ((smoke)); then
  suite_args=()
  if ((${#targets[@]} < ${#targets_all[@]})); then suite_args=("${targets[@]}"); fi
  exec meson test -C "$bdir" --suite fuzz-smoke --no-rebuild --print-errorlogs "${suite_args[@]}"
fi

each=$seconds
((per_target)) || each=$(( seconds / ${#targets[@]} ))
((each > 0)) || each=1
echo "fuzz.sh: ${#targets[@]} target(s), ${each} s each; findings in $bdir/fuzz-findings/, corpus in $bdir/fuzz-corpus/"
failed=()
for t in "${targets[@]}"; do
  if ! bash tests/fuzz/run_target.sh "$bdir/tests/fuzz/$t" "$t" "$each" "tests/fuzz/corpus/$t" \
         "tests/fuzz/dict/${dicts[$t]}.dict" "$bdir/fuzz-findings" "$bdir/fuzz-corpus/$t" -- "${extra[@]}"; then
    failed+=("$t")
  fi
done
echo "fuzz.sh: findings so far:"
find "$bdir/fuzz-findings" -type f 2>/dev/null | sort | sed 's/^/  /' || true
if ((${#failed[@]})); then
  echo "fuzz.sh: stopped on a finding: ${failed[*]}" >&2
  exit 1
fi
