fn main() {
    rkf_bpf_build::build_skeletons("progs");
    // The user-stack target of the rkf_stack tests, with frame pointers.
    println!("cargo:rerun-if-changed=helpers/stack_target.c");
    cc::Build::new()
        .file("helpers/stack_target.c")
        .opt_level(2)
        .flag("-fno-omit-frame-pointer")
        .flag("-fno-optimize-sibling-calls")
        .compile("rkf_stack_target");
}
