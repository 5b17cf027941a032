// SPDX-License-Identifier: GPL-2.0

//! Names for the addresses of stacks, through blazesym: kernel addresses through
//! /proc/kallsyms, user addresses through the mappings of their process while it runs.

use std::{collections::HashMap, sync::Arc};

use anyhow::Result;
use blazesym::{
    symbolize::{
        source::{Process, Source},
        Input, Symbolized, Symbolizer,
    },
    Pid,
};

use super::{Frame, Stack};
use crate::kallsyms::KernelSymbolizer;

const UNKNOWN: &str = "[unknown]";
/// The kernel's object, as perf names it.
const KERNEL: &str = "[kernel.kallsyms]";

/// Symbolises addresses, caching frames: kernel addresses once, user addresses per
/// process.
pub(super) struct Names {
    kernel_symbolizer: KernelSymbolizer,
    symbolizer: Symbolizer,
    kernel: HashMap<u64, Frame>,
    user: HashMap<(u32, u64), Frame>,
    unknown: Arc<str>,
}

impl Names {
    /// Reads the kernel's symbols now: under a slow kernel (KASAN, TCG) reading
    /// /proc/kallsyms takes seconds, during which a ring buffer would fill.
    pub(super) fn new() -> Result<Self> {
        let kernel_symbolizer = KernelSymbolizer::new();
        kernel_symbolizer.preload()?;
        Ok(Self {
            kernel_symbolizer,
            symbolizer: Symbolizer::new(),
            kernel: HashMap::new(),
            user: HashMap::new(),
            unknown: UNKNOWN.into(),
        })
    }

    fn unknown(&self, kernel: bool) -> Frame {
        Frame {
            name: self.unknown.clone(),
            kernel,
            object: if kernel {
                KERNEL.into()
            } else {
                self.unknown.clone()
            },
        }
    }

    fn learn_kernel(&mut self, addrs: &[u64]) {
        let mut new: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.kernel.contains_key(a))
            .collect();
        if new.is_empty() {
            return;
        }
        new.sort_unstable();
        new.dedup();
        let object: Arc<str> = KERNEL.into();
        let frames: Vec<Frame> = match self.kernel_symbolizer.symbolize(&new) {
            Ok(frames) => frames
                .into_iter()
                .map(|f| {
                    f.map_or_else(
                        || self.unknown(true),
                        |f| Frame {
                            name: f.name.into(),
                            kernel: true,
                            object: object.clone(),
                        },
                    )
                })
                .collect(),
            Err(_) => vec![self.unknown(true); new.len()],
        };
        self.kernel.extend(new.into_iter().zip(frames));
    }

    fn learn_user(&mut self, tgid: u32, addrs: &[u64]) {
        let mut new: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.user.contains_key(&(tgid, *a)))
            .collect();
        if new.is_empty() {
            return;
        }
        new.sort_unstable();
        new.dedup();
        let mut process = Process::new(Pid::from(tgid));
        process.debug_syms = false;
        // A process that has exited by now can no longer be symbolised.
        let frames: Vec<Frame> = match self
            .symbolizer
            .symbolize(&Source::Process(process), Input::AbsAddr(&new))
        {
            Ok(syms) => syms
                .iter()
                .map(|s| match s {
                    Symbolized::Sym(sym) => Frame {
                        name: sym.name.as_ref().into(),
                        kernel: false,
                        object: sym
                            .module
                            .as_deref()
                            .map_or_else(|| self.unknown.clone(), |m| m.to_string_lossy().into()),
                    },
                    Symbolized::Unknown(_) => self.unknown(false),
                })
                .collect(),
            Err(_) => vec![self.unknown(false); new.len()],
        };
        self.user
            .extend(new.into_iter().map(|a| (tgid, a)).zip(frames));
    }

    /// The stack of a task of process `tgid` named `comm` (NUL-padded), from its kernel
    /// and user return addresses, each innermost first.
    pub(super) fn stack(&mut self, comm: &[u8], tgid: u32, kernel: &[u64], user: &[u64]) -> Stack {
        self.learn_kernel(kernel);
        self.learn_user(tgid, user);
        let comm: Vec<u8> = comm.iter().copied().take_while(|&b| b != 0).collect();
        let frames = user
            .iter()
            .rev()
            .map(|a| self.user[&(tgid, *a)].clone())
            .chain(kernel.iter().rev().map(|a| self.kernel[a].clone()))
            .collect();
        Stack {
            comm: String::from_utf8_lossy(&comm).into_owned(),
            frames,
        }
    }
}

/// The frames of a stack that a stack kfunc returned `ret` bytes of, innermost first.
pub(super) fn frames(stack: &[u64], ret: i32) -> &[u64] {
    let n = usize::try_from(ret).unwrap_or(0) / 8;
    &stack[..n.min(stack.len())]
}
