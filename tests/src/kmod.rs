// SPDX-License-Identifier: GPL-2.0

//! Loading and unloading modules, through the syscalls insmod and rmmod use (nix's
//! wrappers of them).

use std::{
    ffi::{CStr, CString},
    fs::File,
    io,
    path::Path,
    time::Duration,
};

use anyhow::{Context, Result};
use nix::kmod::{delete_module, finit_module, DeleteModuleFlags, ModuleInitFlags};

/// `finit_module(2)`: loads the module in `path`.
pub fn insmod(path: &Path) -> io::Result<()> {
    insmod_with(path, c"")
}

/// `finit_module(2)`: loads the module in `path` with parameters `params` ("name=value",
/// space-separated), as `insmod path params` does.
pub fn insmod_with(path: &Path, params: &CStr) -> io::Result<()> {
    let f = File::open(path)?;
    finit_module(&f, params, ModuleInitFlags::empty())?;
    Ok(())
}

/// `delete_module(2)` with `O_NONBLOCK`, as rmmod does.
pub fn rmmod(name: &str) -> io::Result<()> {
    let c = CString::new(name)?;
    delete_module(&c, DeleteModuleFlags::O_NONBLOCK)?;
    Ok(())
}

/// Unloads `name`, retrying while it is busy for up to `timeout`: programs that held it
/// are freed asynchronously after their last fd is closed.
pub fn rmmod_wait(name: &str, timeout: Duration) -> Result<()> {
    let start = std::time::Instant::now();
    loop {
        match rmmod(name) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && start.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).with_context(|| format!("rmmod {name}")),
        }
    }
}

/// Unloads `name` if it is loaded, retrying for up to two minutes while it is busy or
/// going, and waits until it is gone (`/sys/module/NAME`).
pub fn unload(name: &str) -> Result<()> {
    let start = std::time::Instant::now();
    loop {
        if !Path::new("/sys/module").join(name).exists() {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(120) {
            anyhow::bail!("{name} is still loaded after two minutes");
        }
        match rmmod(name) {
            // Gone, going, or still in use by programs being released.
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT | libc::EAGAIN | libc::EBUSY)
                ) =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).with_context(|| format!("rmmod {name}")),
        }
    }
}

/// The kernel log from a point on: the records `/dev/kmsg` receives after
/// [`LogCursor::now()`], read by sequence number, so that a ring buffer that wrapped in
/// between fails the read instead of showing older lines as new.
pub struct LogCursor(File);

impl LogCursor {
    /// A cursor at the end of the log.
    pub fn now() -> Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .context("opening /dev/kmsg")?;
        // SEEK_END on /dev/kmsg: the next read returns the next record logged.
        std::io::Seek::seek(&mut f, io::SeekFrom::End(0)).context("seeking /dev/kmsg")?;
        Ok(Self(f))
    }

    /// The messages logged since the cursor was made (or last read), one per line.
    pub fn since(&mut self) -> Result<String> {
        use std::io::Read;
        let mut out = String::new();
        // A record is at most a page (printk's CONSOLE_LOG_MAX and more).
        let mut buf = vec![0u8; 8192];
        loop {
            match self.0.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    // "level,seq,usec,flags;message\n", then " KEY=value" lines.
                    let rec = String::from_utf8_lossy(&buf[..n]);
                    let msg = rec.split_once(';').map_or("", |(_, m)| m);
                    out.push_str(msg.lines().next().unwrap_or(""));
                    out.push('\n');
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                    anyhow::bail!("kernel log records were overwritten before they were read")
                }
                Err(e) => return Err(e).context("reading /dev/kmsg"),
            }
        }
        Ok(out)
    }
}

/// The directory of the modules built for the running kernel (`RKF_MODDIR`).
pub fn moddir() -> Result<std::path::PathBuf> {
    std::env::var_os("RKF_MODDIR").map(Into::into).context(
        "RKF_MODDIR is not set: it names the directory of the modules built for this kernel",
    )
}
