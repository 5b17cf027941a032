// SPDX-License-Identifier: GPL-2.0

//! The ABI between the rkf modules and user space, defined once for Rust.
//!
//! The modules build this file into themselves and user space uses it through rkf-core,
//! so both sides of `/dev/rkf_multi` and of rkf_percpu's probe variable read the same
//! definitions.  c-shim/rkf.h holds the C definitions, for C users and the shims; the
//! modules assert at build time that its generated bindings have the sizes, field offsets
//! and numbers of the types here (rust/abi_check.rs).

pub mod multi;
pub mod percpu;

pub use multi::*;
pub use percpu::*;
