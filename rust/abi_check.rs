// SPDX-License-Identifier: GPL-2.0

//! Build-time checks that the ABI rkf-core defines for Rust (rust/core/src/abi.rs) is the
//! one c-shim/rkf.h defines for C, through the header's generated bindings.

/// Fails the build unless the Rust type `$rust` and the C type `$c` (its generated
/// binding) have the same size and alignment and each listed field the same offset
/// (`rust_field => c_field` where bindgen renamed it).  With every field listed, in
/// order, a field that changed size moves the next one, or the size.
macro_rules! assert_same_layout {
    ($rust:ty, $c:ty, $($rf:ident $(=> $cf:ident)?),+ $(,)?) => {
        const _: () = {
            assert!(core::mem::size_of::<$rust>() == core::mem::size_of::<$c>());
            assert!(core::mem::align_of::<$rust>() == core::mem::align_of::<$c>());
            $($crate::abi_check::assert_same_layout!(@field $rust, $c, $rf $(=> $cf)?);)+
        };
    };
    (@field $rust:ty, $c:ty, $rf:ident => $cf:ident) => {
        assert!(core::mem::offset_of!($rust, $rf) == core::mem::offset_of!($c, $cf));
    };
    (@field $rust:ty, $c:ty, $rf:ident) => {
        assert!(core::mem::offset_of!($rust, $rf) == core::mem::offset_of!($c, $rf));
    };
}

pub(crate) use assert_same_layout;
