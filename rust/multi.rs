// SPDX-License-Identifier: GPL-2.0

//! rkf_multi's links: the device, the checks of every request, the registry of links and
//! the table the trampolines read.
//!
//! Each open file of `/dev/rkf_multi` is one link.  `RKF_MULTI_IOC_ATTACH` attaches it
//! once, to a program and a set of functions; closing the file (or exiting) detaches it.
//! Any number of links may share functions, fentry and fexit mixed: every function has
//! one entry in one table, listing its programs in attach order, and the table is
//! replaced whole, under RCU, on every attach and detach.  Every function has a trampoline
//! generated for it (rkf_core::tramp), which the shared trampoline's lookup does not slow
//! down: code of its own with fexit or session programs, otherwise (but for limits of
//! shape: `tramp_core::MAX_SHARED_PROGS`, `MAX_SITE_OFFSET`) a stub into code its image
//! holds once per shape; the shared one serves where generation failed, or with
//! `generate=0`.  ftrace only sees functions gaining their first link, losing their last,
//! or changing trampoline, in runs of batched updates of each kind per operation, each
//! batch sized by how long the one before took.
//!
//! The rooms, from the bottom up (each uses only those above it):
//!
//! - where its arrays live, in [`area`];
//! - how an attach fails, in [`error`];
//! - references on programs, BTF objects and modules, in [`refs`];
//! - the shared trampoline, in [`shared`], and rkf_multi's ftrace_ops with its batched
//!   updates, computed from routes, in [`ftrace`];
//! - a request read and checked on its own, in [`request`];
//! - an attached link, in [`link`];
//! - generated trampolines, given what they run, in [`image`];
//! - the table built from the links, and its publication, in [`table`];
//! - the template as one sleepable programs may load against, in [`template`];
//! - freeing after grace periods, in [`deferred`];
//! - the links, and attach and detach, in [`registry`];
//! - `/dev/rkf_multi`, in [`device`].

mod area;
pub(crate) mod deferred;
pub(crate) mod device;
mod error;
pub(crate) mod ftrace;
pub(crate) mod image;
mod link;
mod refs;
pub(crate) mod registry;
mod request;
pub(crate) mod shared;
mod table;
pub(crate) mod template;
