// SPDX-License-Identifier: GPL-2.0

//! rkf_multi's rules, in rooms the module and user space include as they need them:
//! [`rules`] (requests), [`table`] (overlapping links) and [`batch`] (the size of ftrace
//! updates) are built into rkf_multi too;
//! [`glob`] and the decoding of refusals serve user space only, and [`lookup`](mod@lookup) is the
//! host model of the trampoline's C lookup.

pub mod batch;
pub mod glob;
pub mod lookup;
pub mod rules;
pub mod table;
mod user;

pub use batch::*;
pub use glob::*;
pub use lookup::*;
pub use rules::*;
pub use table::*;
