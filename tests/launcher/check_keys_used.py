#!/usr/bin/env python3
"""No configuration key is silently ignored (issue 26 item 1).

check_keys_used.py WALK_SCHEMA SOURCE_ROOT

Every key of both schemas (walk_schema lists them from the schema itself, so a key added later is checked too) must
be, for a valid non-default value:
  - refused or warned about, naming the key (walk_schema runs unsupported_setting / setting_warnings / check_launch);
  - a launch key exported to the launched processes, where its variables change the library's config (or the library
    refuses the job its section describes), or read by the launcher's own code; or
  - an accelerator key read by the library's code (src/, capi/src/, and the config library's functions the library
    calls): through the typed views (`settings_.ddp_kwargs.static_graph`, a section bound to a name and read
    through it, `DdpKwargs::Key::static_graph`) or by its dotted path ("ddp_kwargs.static_graph").
A key that is none of these fails the test, named. The reading is found in the sources with comments removed: a
key named only in a comment or a help text does not count.
"""
import pathlib
import re
import subprocess
import sys

# Keys whose whole Accelerate meaning has nothing to act on in libacc, each with the reason (docs/configuration.md
# says the same). Nothing may enter this list without a reason a reader can check in Accelerate's source.
INERT = {
    # AcceleratedScheduler.step: during accumulation it only adds to torch's scheduler._step_count, which feeds a
    # warning about call order and nothing else; the learning rate is the same either way.
    "gradient_accumulation_plugin.adjust_scheduler",
    # utils/launch.py (prepare_multi_gpu_env): with several machines, torchrun gets MASTER_ADDR/PORT (true) or an
    # rdzv_endpoint at the same address (false); under the static rendezvous both fix the machine ranks, which is
    # what acc launch does with main_process_ip:main_process_port (rdzv_backend other than static is warned about).
    "same_network",
    # DeepSpeedSequenceParallelConfig.sp_attn_implementation (utils/dataclasses.py) names the core attention that
    # UlyssesSPAttentionHF wraps, which must match the model's attn_implementation. libacc's families attend with
    # torch's scaled_dot_product_attention whatever it names (SDPA picks flash kernels itself where the device has
    # them); the values Accelerate refuses (eager, flex_attention, unknown names) are refused (parallelism.cpp).
    "parallelism_config.sp_attn_implementation",
}


def strip_comments(text):
    """C/C++ text without comments (string literals kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def read_sources(root, dirs, only=None):
    files = {}
    for d in dirs:
        for p in sorted((root / d).rglob("*")):
            if p.suffix in (".cpp", ".hpp", ".h", ".c") and (only is None or p.name in only):
                files[str(p.relative_to(root))] = strip_comments(p.read_text(errors="replace"))
    return files


def camel(section):
    return "".join(part.capitalize() for part in section.split("_"))


def read_by(files, key, top_level_names):
    """The files that read `key`, by the rules in the module's docstring."""
    section, _, name = key.rpartition(".")
    last = section.rpartition(".")[2]
    hits = []
    for path, text in files.items():
        if name not in text:  # every rule below needs the key's last name in the text: most files are passed here
            continue
        if f'"{key}"' in text:
            hits.append(path)
            continue
        if not section:
            if re.search(top_level_names + r"\s*\.\s*" + name + r"\b", text):
                hits.append(path)
            continue
        if re.search(r"\b" + last + r"\s*\.\s*" + name + r"\b", text):
            hits.append(path)
            continue
        mentions = re.search(r"\b" + last + r"\b|\b" + camel(last) + r"\b", text)
        if mentions and re.search(r"\bKey::" + name + r"\b", text):
            hits.append(path)
            continue
        # A section bound to a name (`const auto& k = settings_.ddp_kwargs;` or a parameter of the section's type),
        # then read through it.
        aliases = re.findall(r"(\w+)\s*=\s*[\w.()>\-]*\b" + last + r"\s*;", text)
        types = [camel(last)] + re.findall(r"using\s+(\w+)\s*=\s*[\w:]*\b" + camel(last) + r"\s*;", text)
        for type_ in types:
            aliases += re.findall(r"\b" + type_ + r"\s*&\s*(\w+)", text)
        if any(re.search(r"\b" + a + r"\s*\.\s*" + name + r"\b", text) for a in aliases):
            hits.append(path)
    return hits


def main():
    walker, root = sys.argv[1], pathlib.Path(sys.argv[2])
    walked = subprocess.run([walker], capture_output=True, text=True, check=True).stdout.splitlines()
    library = read_sources(root, ["src", "capi/src"])
    # The config library's functions that the library calls on a resolved accelerator config (sharding,
    # unsupported_setting, resolution that folds one key into another, DeepSpeed config files).
    library.update(read_sources(root, ["base/src"], {"tools.cpp", "resolve.cpp", "deepspeed.cpp"}))
    # The launcher's code, without what only names keys: the option table (`flag(...)`, `opt(...)`: an option sets a
    # key, it does not use it) and the questionnaire and `acc config explain` (config_cmd.cpp: they write and show).
    launcher = {path: re.sub(r"\b(?:flag|opt)\([^;]*\);", "", text, flags=re.S)
                for path, text in read_sources(root, ["launcher"]).items() if not path.endswith("config_cmd.cpp")}
    # The config library's launch side: the environment it exports, and check_launch.
    launcher.update(read_sources(root, ["base/src"], {"launch_env.cpp", "resolve.cpp"}))
    accel_names = r"\b(?:settings_|settings\(\)|s|a->settings_)"
    launch_names = r"\b(?:s|settings|launch|plan\.settings|r\.settings)"

    # The scan must be able to miss: a key nobody reads is found nowhere.
    assert not read_by(library, "ddp_kwargs.no_such_key", accel_names), "the source scan finds what is not there"
    assert read_by(library, "ddp_kwargs.bucket_cap_mb", accel_names), "the source scan misses a view read"

    failures, rows, seen = [], [], set()
    for line in walked:
        schema, key, rest = (line.split(" ", 2) + [""])[:3]
        seen.add((schema, key))
        how = []
        if rest and rest != "-":
            how.append(rest)
        files = read_by(library if schema == "accelerator" else launcher, key,
                        accel_names if schema == "accelerator" else launch_names)
        if files:
            how.append("read in " + ", ".join(files[:3]) + (" ..." if len(files) > 3 else ""))
        exported_unread = schema == "launch" and "exported" in rest and " feeds " not in rest and \
            "context-refused" not in rest and "refused" not in rest.split(" exported")[0] and not files
        if exported_unread:
            # Variables outside Accelerate's own (CUDA_VISIBLE_DEVICES, KMP_*) are read by CUDA and OpenMP.
            vars_ = rest.split("exported ", 1)[1].split(" ")[0].split(",")
            if all(v.startswith(("ACCELERATE_", "FSDP_", "PARALLELISM_CONFIG_", "MEGATRON_LM_")) for v in vars_):
                how = []
        if not how and key in INERT:
            how.append("inert: nothing to act on (see check_keys_used.py INERT)")
        if not how:
            failures.append(f"{schema} key '{key}': neither read by the library or launcher nor refused")
        rows.append(f"{schema:11} {key:60} {'; '.join(how) if how else 'IGNORED'}")
    print("\n".join(rows))
    if len(seen) < 100:
        failures.append(f"walk_schema listed only {len(seen)} keys")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        return 1
    print(f"{len(seen)} keys: each one read, exported, refused or warned about")
    return 0


if __name__ == "__main__":
    sys.exit(main())
