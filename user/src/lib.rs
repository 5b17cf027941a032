// SPDX-License-Identifier: GPL-2.0

//! rkf userspace: the library behind the `rkf` CLI and the rkf selftests.

pub mod btf;
pub mod cpus;
pub mod kallsyms;
pub mod modules;
pub mod percpu;

mod skel {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/percpu_read.skel.rs"));
}
