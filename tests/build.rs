fn main() {
    rkf_bpf_build::build_skeletons("progs");
}
