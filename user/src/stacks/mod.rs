// SPDX-License-Identifier: GPL-2.0

//! Stack profiles taken with rkf_stack: on-CPU (`rkf profile`) and off-CPU
//! (`rkf offcputime`).
//!
//! Both programs write every stack straight into a ring buffer record; nothing goes
//! through a stack map.  Here the records are symbolised ([`names`]), counted by stack
//! ([`Stacks`]), and written out as folded stacks, as an inferno flame graph, or as pprof.

mod names;
pub mod offcpu;
mod pprof;
pub mod profile;
mod record;
mod stack;

pub use stack::{Frame, Kind, Stack, Stacks};
