// SPDX-License-Identifier: GPL-2.0

//! rkf userspace: the library behind the `rkf` CLI and the rkf selftests.

pub mod btf;
pub mod cpus;
pub mod funccount;
pub mod funclatency;
pub mod interrupt;
pub mod kallsyms;
pub mod limits;
pub mod modules;
pub mod multi;
pub mod percpu;
pub mod perf;
pub mod skeleton;
pub mod stacks;

mod skel {
    #![allow(clippy::all, missing_docs)]
    pub mod offcputime {
        include!(concat!(env!("OUT_DIR"), "/offcputime.skel.rs"));
    }
    pub mod funccount {
        include!(concat!(env!("OUT_DIR"), "/funccount.skel.rs"));
    }
    pub mod funclatency {
        include!(concat!(env!("OUT_DIR"), "/funclatency.skel.rs"));
    }
    pub mod percpu_read {
        include!(concat!(env!("OUT_DIR"), "/percpu_read.skel.rs"));
    }
    pub mod profile {
        include!(concat!(env!("OUT_DIR"), "/profile.skel.rs"));
    }
}
