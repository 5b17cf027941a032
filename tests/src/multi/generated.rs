// SPDX-License-Identifier: GPL-2.0

//! Generated trampolines: the images rkf_multi generates for functions, as kallsyms and a
//! stack taken inside a program show them, made, replaced and freed as links come and go.

use std::mem::MaybeUninit;

use anyhow::{bail, Result};

use super::{
    attach,
    basic::{run_once, setup},
    tramps::{check_tramps, Tramp},
};
use crate::{check, check_eq, diag};
use rkf::kallsyms::{Kallsyms, KernelSymbolizer};

/// The images of generated trampolines that kallsyms shows now.
fn tramp_images() -> Result<Vec<String>> {
    Ok(Kallsyms::load()?
        .symbols()
        .iter()
        .filter(|s| s.module.as_deref() == Some("bpf") && s.name.starts_with("rkf_multi_image_"))
        .map(|s| s.name.clone())
        .collect())
}

/// Waits until the images of generated trampolines that kallsyms shows are `done`: images
/// go once no task can run them any more (an RCU tasks grace period after their last user
/// went).
fn wait_tramp_images(what: &str, done: impl Fn(&[String]) -> bool) -> Result<()> {
    let start = std::time::Instant::now();
    loop {
        let left = tramp_images()?;
        if done(&left) {
            return Ok(());
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            bail!("{what}: images in kallsyms after 60 s: {left:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Functions run through trampolines generated for them, BPF text that kallsyms names
/// `rkf_multi_image_<n>`: a stack taken inside the program shows one, and walks on through
/// it to the traced function and its callers.  Images are shared by the functions of one
/// operation, replaced when a function's programs change, and freed once no link uses
/// them.
pub(super) fn generated_trampolines() -> Result<()> {
    let mut obj = MaybeUninit::uninit();
    let (mut skel, funcs) = setup(&mut obj)?;
    wait_tramp_images("no image before the test", <[String]>::is_empty)?;
    let link = attach(&skel.progs.multi_stack, &funcs[..1], None)?;
    let images = tramp_images()?;
    check_eq!(images.len(), 1, "images with one fentry link: {images:?}");
    let bss = run_once(&mut skel)?;
    check!(
        bss.stack_len > 0,
        "bpf_get_stack() in the program: {}",
        bss.stack_len
    );
    let ks = KernelSymbolizer::new();
    let frames: Vec<String> = bss.stack[..bss.stack_len as usize / 8]
        .iter()
        .map(|&a| ks.name(a).unwrap_or_else(|| format!("{a:#x}")))
        .collect();
    diag!("stack: {}", frames.join(" <- "));
    let at = |name: &str| frames.iter().position(|f| f == name);
    let tramp = frames.iter().position(|f| f == &images[0]);
    check!(
        tramp.is_some(),
        "the stack shows the generated trampoline {}",
        images[0]
    );
    check!(
        at("bpf_fentry_test1") > tramp && at("bpf_prog_test_run_tracing") > at("bpf_fentry_test1"),
        "the stack walks through the trampoline to bpf_fentry_test1 and its caller"
    );
    // A second link on more functions: one new image, for the functions it changed; the
    // first image goes once no function uses it.  Closing the first link then changes
    // bpf_fentry_test1's programs again: it gets a third image.
    let counter = attach(&skel.progs.count_fentry0, &funcs, None)?;
    let new: Vec<String> = tramp_images()?
        .into_iter()
        .filter(|i| i != &images[0])
        .collect();
    check_eq!(new.len(), 1, "images the second link made: {new:?}");
    drop(link);
    let bss = run_once(&mut skel)?;
    check!(
        bss.counts[0][..funcs.len()].iter().all(|&c| c == 1),
        "one hit per function: {:?}",
        &bss.counts[0][..funcs.len()]
    );
    check_eq!(bss.stack_len, 0, "the closed link's program ran");
    wait_tramp_images("the first image gone", |left| !left.contains(&images[0]))?;
    // The one of the eight functions whose programs stayed, and bpf_fentry_test1's new one.
    let left = tramp_images()?;
    check_eq!(
        left.len(),
        2,
        "images after the first link closed: {left:?}"
    );
    // An fexit program on some of them gives those new trampolines, generated with the
    // fexit program too: still one hit per function for each program.  A session
    // program on one more gives it a generated session trampoline.
    let fexit = attach(&skel.progs.count_fexit2, &funcs[..3], None)?;
    let session = attach(&skel.progs.session0, &funcs[3..4], None)?;
    check_tramps(
        &funcs[..3],
        Tramp::Generated,
        "with fentry and fexit programs",
    )?;
    check_tramps(&funcs[3..4], Tramp::Generated, "with a session program")?;
    let bss = run_once(&mut skel)?;
    check!(
        bss.counts[0][..funcs.len()].iter().all(|&c| c == 1)
            && bss.counts[6][..3].iter().all(|&c| c == 1),
        "fentry and fexit counts with both links: {:?} {:?}",
        &bss.counts[0][..funcs.len()],
        &bss.counts[6][..3]
    );
    // The one call of the session's function: an entry run with a zeroed cookie, an exit
    // run that finds what the entry run wrote there.
    let session_runs = |b: &crate::skel::multi::types::bss| {
        (
            b.sess_entry[0],
            b.sess_exit[0],
            b.sess_cookie_ok[0],
            b.sess_nonzero_cookie[0],
        )
    };
    check_eq!(
        session_runs(bss),
        (1, 1, 1, 0),
        "the session's (entry runs, exit runs, cookies read back, cookies not zeroed)"
    );
    drop(fexit);
    drop(session);
    let bss = run_once(&mut skel)?;
    check!(
        bss.counts[0][..funcs.len()].iter().all(|&c| c == 1)
            && bss.counts[6].iter().all(|&c| c == 0),
        "counts after the fexit link closed: {:?} {:?}",
        &bss.counts[0][..funcs.len()],
        &bss.counts[6][..3]
    );
    check_eq!(
        session_runs(bss),
        (0, 0, 0, 0),
        "the session's runs after its link closed"
    );
    drop(counter);
    wait_tramp_images("no image after every link closed", <[String]>::is_empty)
}
