// SPDX-License-Identifier: GPL-2.0

//! The life of a libbpf-rs skeleton, once for every rkf program and test: open it, fill in
//! its globals, load it, and attach the programs that attach by their section name.

use std::mem::MaybeUninit;

use anyhow::{Context, Result};
use libbpf_rs::{
    skel::{OpenSkel, Skel, SkelBuilder},
    OpenObject,
};

/// The loaded skeleton of builder `B`.
pub type Loaded<'obj, B> = <<B as SkelBuilder<'obj>>::Output as OpenSkel<'obj>>::Output;

/// Opens the skeleton of builder `B` in `obj`, lets `setup` fill in its globals (and
/// choose what loads), and loads it.  `what` (the program's file name) names it in errors.
pub fn load<'obj, B>(
    obj: &'obj mut MaybeUninit<OpenObject>,
    what: &str,
    setup: impl FnOnce(&mut B::Output) -> Result<()>,
) -> Result<Loaded<'obj, B>>
where
    B: SkelBuilder<'obj> + Default,
{
    let mut open = B::default()
        .open(obj)
        .with_context(|| format!("opening {what}"))?;
    setup(&mut open).with_context(|| format!("setting up {what}"))?;
    open.load().with_context(|| format!("loading {what}"))
}

/// [`load()`], then attaches every program that attaches by its section name.
pub fn load_and_attach<'obj, B>(
    obj: &'obj mut MaybeUninit<OpenObject>,
    what: &str,
    setup: impl FnOnce(&mut B::Output) -> Result<()>,
) -> Result<Loaded<'obj, B>>
where
    B: SkelBuilder<'obj> + Default,
{
    let mut skel = load::<B>(obj, what, setup)?;
    skel.attach().with_context(|| format!("attaching {what}"))?;
    Ok(skel)
}

/// A `setup` for [`load()`] that changes nothing.
pub fn as_built<T>(_: &mut T) -> Result<()> {
    Ok(())
}
