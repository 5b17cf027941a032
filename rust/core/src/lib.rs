// SPDX-License-Identifier: GPL-2.0

//! rkf's pure logic.
//!
//! Everything here is `no_std` and free of kernel bindings, so that the same source files
//! build into the kernel modules (each crate root includes them with `#[path]`) and, as
//! this crate, for the host, where `cargo test` and proptest exercise them.

#![no_std]

pub mod abi;
pub mod multi;
pub mod percpu;
pub mod stack;
pub mod tramp;
