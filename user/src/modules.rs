// SPDX-License-Identifier: GPL-2.0

//! Checks that an rkf module is loaded and usable.

use std::path::Path;

use anyhow::{bail, Result};

/// Fails with a message saying what to do unless `module` is loaded with its BTF.
///
/// A module without BTF in the kernel loads, but no program can call its kfuncs: the
/// verifier then reports an unknown kfunc, which says nothing about the cause.
pub fn require(module: &str) -> Result<()> {
    if !Path::new("/sys/module").join(module).exists() {
        bail!("the {module} module is not loaded: insmod {module}.ko (see the README, \"Using rkf on your own kernel\")");
    }
    if !Path::new("/sys/kernel/btf").join(module).exists() {
        bail!("{module} is loaded but the kernel holds no BTF for it, so its kfuncs cannot be called; see dmesg for \"BTF\" messages and rebuild the module against the running kernel's tree");
    }
    Ok(())
}
