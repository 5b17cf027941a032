// SPDX-License-Identifier: GPL-2.0

//! The templates rkf_multi programs are verified against, `rkf_multi_tmpl6()` and
//! `rkf_multi_tmpl12()` (c-shim/rkf_multi_run.c), as functions sleepable programs may be
//! verified against.

use kernel::{bindings, error::to_result, prelude::*};

use crate::{kfunc::KfuncSet, rkf_h};

/// The set with the templates (`rkf_multi_fmodret_set`).
static FMODRET: KfuncSet =
    // SAFETY: the shim defines `rkf_multi_fmodret_set` with `BTF_SET8_START/END`, as a
    // const object, never written.
    unsafe { KfuncSet::new(&rkf_h::rkf_multi_fmodret_set) };

/// The templates in the verifier's fmodret set with `KF_SLEEPABLE`
/// (`btf_id_allow_sleepable()` in kernel/bpf/verifier.c), which lets `fentry.s` and
/// `fexit.s` programs load against them; which functions they may then trace is checked
/// at attach time (rkf_core::multi::may_sleep()).
///
/// There is nothing to unregister: the kernel drops a module's sets together with the
/// module's BTF when the module goes away.
pub(crate) struct SleepableTemplate {
    _private: (),
}

impl SleepableTemplate {
    /// Registers the set; fails if resolve_btfids did not patch its BTF id, or the kernel
    /// refuses it.
    ///
    /// # Safety
    ///
    /// Called once, from rkf_multi's init: the kernel takes a module's sets only from its
    /// init.
    pub(crate) unsafe fn register() -> Result<Self> {
        if !crate::kfunc::ids_resolved(&FMODRET) {
            pr_err!(
                "the templates' BTF ids are unresolved: resolve_btfids did not run on the module\n"
            );
            return Err(EINVAL);
        }
        // SAFETY: the set is a valid, 'static set owned by this module, and this runs from
        // module init (this function's safety contract), as register_btf_fmodret_id_set()
        // requires.
        to_result(unsafe { bindings::register_btf_fmodret_id_set(FMODRET.as_raw()) })
            .inspect_err(|e| pr_err!("cannot register the sleepable templates: {:?}\n", e))?;
        Ok(Self { _private: () })
    }
}
