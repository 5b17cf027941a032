// SPDX-License-Identifier: GPL-2.0

//! Build-script helper shared by the rkf userspace crates.
//!
//! Compiles every `*.bpf.c` in a directory with clang-19 against the `vmlinux.h` that the
//! Makefile generates from the kernel under test (`build/include/vmlinux.h`) and the rkf
//! BPF header (`include/rkf.bpf.h`), and writes one libbpf-cargo skeleton per program to
//! `$OUT_DIR/<name>.skel.rs`.

use std::{env, fs, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

const CLANG: &str = "/usr/lib/llvm-19/bin/clang";

/// Compiles the BPF programs in `dir` (relative to the crate) into skeletons.
///
/// # Panics
///
/// Panics, failing the build with a message, when `vmlinux.h` has not been generated or a
/// program does not compile.
pub fn build_skeletons(dir: &str) {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest
        .ancestors()
        .find(|p| p.join("Kbuild").is_file())
        .expect("the rkf source tree (a directory with Kbuild) above the crate")
        .to_path_buf();
    let gen_include = root.join("build/include");
    let vmlinux_h = gen_include.join("vmlinux.h");
    assert!(
        vmlinux_h.is_file(),
        "{} does not exist: build through the Makefile (`make user`), which generates it from the kernel",
        vmlinux_h.display()
    );
    let rkf_include = root.join("include");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));

    println!("cargo:rerun-if-changed={}", vmlinux_h.display());
    println!("cargo:rerun-if-changed={}", rkf_include.display());
    let src_dir = manifest.join(dir);
    println!("cargo:rerun-if-changed={}", src_dir.display());

    let mut sources: Vec<PathBuf> = fs::read_dir(&src_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", src_dir.display()))
        .map(|e| e.expect("readdir").path())
        .filter(|p| p.to_string_lossy().ends_with(".bpf.c"))
        .collect();
    sources.sort();

    for src in sources {
        let name = src
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".bpf.c"))
            .expect("a .bpf.c file name")
            .to_owned();
        println!("cargo:rerun-if-changed={}", src.display());
        SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{name}.bpf.o")))
            .clang(CLANG)
            .clang_args([
                "-Wall".into(),
                "-Werror".into(),
                // vmlinux.h from pahole 1.24 BTF has empty struct members.
                "-Wno-missing-declarations".into(),
                "-g".into(),
                "-O2".into(),
                format!("-I{}", gen_include.display()),
                format!("-I{}", rkf_include.display()),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building the skeleton of {}: {e:#}", src.display()));
    }
}
