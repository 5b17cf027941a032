// SPDX-License-Identifier: GPL-2.0

//! Stack profiles taken with rkf_stack: on-CPU (`rkf profile`) and off-CPU
//! (`rkf offcputime`).
//!
//! Both programs write every stack straight into a ring buffer record; nothing goes
//! through a stack map.  User stacks come as build id + file offset.  Here the records
//! are counted, symbolised after the run (`names`), and written out ([`Stacks`]) as folded
//! stacks, as an inferno flame graph, or as pprof.

mod names;
pub mod offcpu;
mod pprof;
pub mod profile;
mod record;
mod stack;

pub use stack::{Counts, Frame, Kind, Stack, Stacks};
