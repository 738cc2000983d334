//! Finds libacc. Order: ACC_LIB_DIR (a directory holding libacc.so), then pkg-config for `acc`
//! (accepting the ABI's version range; PKG_CONFIG_PATH may point at meson's uninstalled .pc in
//! `<build>/meson-uninstalled`). Never compiles C or C++ and never touches LibTorch: libacc already
//! holds all of it behind its C ABI. The FFI declarations are pre-generated (src/bindings.rs).
use std::env;
use std::process::Command;

/// libacc versions this crate's ABI serves: the same ABI major.
const MIN_VERSION: &str = "0.1";
const MAX_VERSION: &str = "1.999";

fn main() {
    for var in ["ACC_LIB_DIR", "ACC_INCLUDE_DIR", "PKG_CONFIG_PATH", "PKG_CONFIG"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if let Some(dir) = env::var_os("ACC_LIB_DIR") {
        let dir = dir.to_string_lossy().into_owned();
        println!("cargo:rustc-link-search=native={dir}");
        println!("cargo:rustc-link-lib=dylib=acc");
        println!("cargo:lib_dir={dir}");
        return;
    }
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let query = |args: &[&str]| -> Result<String, String> {
        let out = Command::new(&pkg_config)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run {pkg_config}: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    };
    let found = query(&["--atleast-version", MIN_VERSION, "acc"])
        .and_then(|_| query(&["--max-version", MAX_VERSION, "acc"]))
        .and_then(|_| query(&["--libs-only-L", "--libs-only-l", "acc"]));
    match found {
        Ok(flags) => {
            let mut linked = false;
            for flag in flags.split_whitespace() {
                if let Some(dir) = flag.strip_prefix("-L") {
                    println!("cargo:rustc-link-search=native={dir}");
                    println!("cargo:lib_dir={dir}");
                } else if let Some(lib) = flag.strip_prefix("-l") {
                    println!("cargo:rustc-link-lib=dylib={lib}");
                    linked |= lib == "acc";
                }
            }
            if !linked {
                println!("cargo:rustc-link-lib=dylib=acc");
            }
        }
        Err(why) => {
            let version = query(&["--modversion", "acc"]).unwrap_or_default();
            let detail = if version.is_empty() {
                why
            } else {
                format!("found libacc {version}, but this crate serves versions {MIN_VERSION} to {MAX_VERSION}")
            };
            panic!(
                "acc-sys: libacc not found ({detail}).\n\
                 Set ACC_LIB_DIR to the directory holding libacc.so, or PKG_CONFIG_PATH to one holding \
                 acc.pc (for a meson build tree: <build>/meson-uninstalled)."
            );
        }
    }
}
