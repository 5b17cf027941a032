// SPDX-License-Identifier: GPL-2.0

//! rkf_multi: one fentry or fexit BPF program on many kernel functions, through one shared
//! ftrace-direct trampoline with batched, all-or-nothing updates.
//!
//! Programs are loaded as TRACING fentry/fexit programs against `rkf_multi_tmpl6()`, a
//! function of this module's BTF taking six u64, so they read the traced function's
//! arguments through ctx.  A link is an open file of `/dev/rkf_multi` (rust/multi.rs);
//! the trampoline is c-shim/rkf_multi_tramp.S and its C half c-shim/rkf_multi_shim.c.

use kernel::{
    miscdevice::{MiscDeviceOptions, MiscDeviceRegistration},
    prelude::*,
};

mod multi;
#[path = "core/src/multi.rs"]
#[expect(
    unreachable_pub,
    reason = "shared with the rkf-core host crate, where it is public"
)]
#[allow(dead_code, reason = "parts of the shared rules serve user space only")]
mod multi_core;

module! {
    type: RkfMulti,
    name: "rkf_multi",
    authors: ["rkf developers"],
    description: "rkf: one fentry/fexit BPF program on many functions, through a shared trampoline",
    license: "GPL",
}

#[pin_data(PinnedDrop)]
struct RkfMulti {
    #[pin]
    _dev: MiscDeviceRegistration<multi::LinkFile>,
}

impl kernel::InPlaceModule for RkfMulti {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        // SAFETY: called once, from module init, before the device exists.
        let ready = unsafe { multi::init() };
        try_pin_init!(Self {
            _dev <- {
                ready?;
                MiscDeviceRegistration::register(MiscDeviceOptions {
                    name: c"rkf_multi",
                })
            },
        })
    }
}

#[pinned_drop]
impl PinnedDrop for RkfMulti {
    fn drop(self: Pin<&mut Self>) {
        // No file is open and no link exists (both hold a module reference); tasks may
        // still be inside traced functions, due back through the trampoline.
        multi::exit();
    }
}
