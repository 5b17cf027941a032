// SPDX-License-Identifier: GPL-2.0

//! rkf_multi from user space: choosing the functions, attaching links, reading them back.
//!
//! A program for rkf_multi is a TRACING fentry or fexit program loaded against the
//! module's `rkf_multi_tmpl6()` (`RKF_MULTI_FENTRY`/`RKF_MULTI_FEXIT` in rkf.bpf.h), or
//! against `rkf_multi_tmpl12()` for functions of up to twelve arguments
//! (`RKF_MULTI_FENTRY12`/`RKF_MULTI_FEXIT12`), with auto-attach off.  [`resolve()`] (or
//! [`resolve_wide()`]) turns names and globs into functions, skipping (with a reason) those
//! the trampoline cannot trace honestly; [`Link::attach()`] attaches the
//! program to them through `/dev/rkf_multi`; dropping the [`Link`] detaches it.
//!
//! The root: the re-exports, every item at `rkf::multi::NAME`.  The rooms:
//!
//! - `resolve`: patterns resolved to functions ([`Func`], [`Resolved`], [`Skip`]), and
//!   checked against /proc/kallsyms;
//! - `ftrace`: what tracefs says: direct calls, their holders, the functions ftrace can hook;
//! - `device`: `/dev/rkf_multi`, its [`ioctl`]s and the raw requests;
//! - `link`: [`Link`], [`LinkInfo`] and [`links()`], and a program's statistics.

mod device;
mod ftrace;
mod link;
mod resolve;

pub use rkf_core::abi::{AttachRequest, FuncInfo};

pub use device::{attach_request, info_request, ioctl, DEVICE};
pub use ftrace::{
    direct_callers, direct_holders, enabled_functions, ftrace_function_lines, ftrace_functions,
    holders, parse_direct_callers, parse_direct_calls, resolve_ends, tracefs, DirectCall,
    DIRECT_CALLER_READS,
};
pub use link::{links, prog_stats, AttachError, Link, LinkInfo, ProgStats};
pub use resolve::{
    check_patterns, qualified_name, resolve, resolve_for_counters, resolve_wide, Func, Resolved,
    Skip,
};
