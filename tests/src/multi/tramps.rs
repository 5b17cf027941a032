// SPDX-License-Identifier: GPL-2.0

//! Which of rkf_multi's trampolines a function runs through, generated or shared, and
//! rkf_multi reloaded with every function on the shared one.

use anyhow::{Context, Result};

use crate::{check, diag, lifecycle::MULTI};
use rkf::multi::{self, Func};

/// Runs `f` with rkf_multi reloaded with `generate=0`, every function on the shared
/// trampoline, then reloads it with its default parameters, as the runner loaded it,
/// however `f` ends (an error, a panic, rkf_multi unloaded by `f` itself): `f`'s error
/// comes first.
///
/// The attach storms need it: multi-threaded TCG mishandles the patching of an ftrace
/// site that another vCPU runs in a loop (README, "Known problem"), and a function with
/// its own trampoline has its site patched whenever its programs change.
pub(crate) fn with_shared_only<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    use crate::kmod::{insmod, insmod_with, moddir, unload};

    /// Reloads rkf_multi with its default parameters: by `finish()`, or when dropped on
    /// the way out of a failure or a panic.
    struct Restore(Option<std::path::PathBuf>);
    impl Restore {
        fn reload(ko: &std::path::Path) -> Result<()> {
            unload(MULTI)?;
            insmod(ko).context("insmod rkf_multi again")
        }
        fn finish(mut self) -> Result<()> {
            self.0.take().map_or(Ok(()), |ko| Self::reload(&ko))
        }
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(ko) = self.0.take() {
                if let Err(e) = Self::reload(&ko) {
                    diag!("rkf_multi not restored: {e:#}");
                }
            }
        }
    }

    let ko = moddir()?.join(format!("{MULTI}.ko"));
    unload(MULTI)?;
    let restore = Restore(Some(ko.clone()));
    insmod_with(&ko, c"generate=0").context("insmod rkf_multi generate=0")?;
    let r = f();
    let back = restore.finish();
    let v = r?;
    back?;
    Ok(v)
}

/// Which of rkf_multi's trampolines a function's ftrace site calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tramp {
    /// Its own, generated (`rkf_multi_image_<n>` in kallsyms).
    Generated,
    /// The shared one (`rkf_multi_tramp`).
    Shared,
}

impl Tramp {
    /// Runs `f` under rkf_multi as loaded (`Generated`), then reloaded with `generate=0`
    /// (`Shared`).
    pub(crate) fn run_both(f: impl Fn(Tramp) -> Result<()>) -> Result<()> {
        let generated = f(Tramp::Generated);
        let shared = with_shared_only(|| f(Tramp::Shared));
        generated.context("through generated trampolines")?;
        shared.context("through the shared trampoline (generate=0)")
    }

    /// The kind of rkf_multi trampoline `caller` is, a site's direct caller by symbol, or
    /// `None` if it is none of rkf_multi's.
    pub(crate) fn of(caller: &str) -> Option<Tramp> {
        if caller.starts_with("rkf_multi_image_") {
            Some(Tramp::Generated)
        } else if caller == "rkf_multi_tramp" {
            Some(Tramp::Shared)
        } else {
            None
        }
    }
}

/// The direct callers of `funcs`: the trampoline each one's site calls, if any.
pub(crate) fn callers(funcs: &[Func]) -> Result<Vec<Option<String>>> {
    let all = multi::direct_callers()?;
    Ok(funcs
        .iter()
        .map(|f| all.get(&f.qualified_name()).cloned())
        .collect())
}

/// Checks that each of `funcs` is called by rkf_multi's trampoline of kind `t`.
pub(crate) fn check_tramps(funcs: &[Func], t: Tramp, what: &str) -> Result<()> {
    let callers = multi::direct_callers()?;
    for f in funcs {
        let c = callers
            .get(&f.qualified_name())
            .map(String::as_str)
            .unwrap_or("none");
        check!(
            Tramp::of(c) == Some(t),
            "{what}: {} called through {c}, not the {t:?} trampoline",
            f.name
        );
    }
    Ok(())
}
