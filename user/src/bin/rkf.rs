// SPDX-License-Identifier: GPL-2.0

//! `rkf`: command-line front end of the rkf kernel modules.

use std::{path::PathBuf, time::Duration};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use comfy_table::CellAlignment::{Left, Right};

use rkf::{
    btf::ValueKind,
    funccount, funclatency, limits,
    percpu::{self, Reading, Target, MAX_VALUE},
    stacks::{offcpu, profile, Stacks},
};

#[derive(Parser)]
#[command(name = "rkf", version, about = "Use the rkf BPF kfunc modules")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print a per-cpu variable, or one field of it, for every cpu (needs rkf_percpu).
    ///
    /// SYMBOL is a per-cpu variable of vmlinux or of a loaded module, with BTF; FIELD is a
    /// path of struct members, for example `runqueues.nr_running`. A small struct is
    /// printed one column per member.
    Percpu {
        /// SYMBOL[.FIELD...]
        spec: String,
        /// Also print each cpu's address.
        #[arg(short, long)]
        addr: bool,
        /// Print integers in hexadecimal.
        #[arg(short = 'x', long)]
        hex: bool,
    },
    /// Sample on-CPU stacks and write folded stacks and a flame graph (needs rkf_stack).
    ///
    /// A cpu-clock event on every online cpu runs a perf_event program that takes the
    /// interrupted task's stacks with bpf_rkf_get_stack_pe(). Without --folded, --svg or
    /// --pprof, the folded stacks go to stdout.
    Profile {
        /// Samples per second on each cpu (1 to 10000).
        #[arg(short = 'F', long, default_value = "49", value_parser = limits::parse_frequency)]
        frequency: u64,
        /// Seconds to sample (fractions allowed, at most a day); Ctrl-C ends it early.
        #[arg(short, long, value_name = "SECONDS", default_value = "5", value_parser = limits::parse_duration)]
        duration: Duration,
        /// Only this process (all its threads); the whole system otherwise.
        #[arg(short, long)]
        pid: Option<u32>,
        /// Kernel stacks only.
        #[arg(short = 'K', long, conflicts_with = "user_only")]
        kernel_only: bool,
        /// User stacks only.
        #[arg(short = 'U', long)]
        user_only: bool,
        /// Count the idle tasks too.
        #[arg(long)]
        idle: bool,
        #[command(flatten)]
        out: Outputs,
    },
    /// Time spent off a cpu, by stack, like bcc's offcputime (needs rkf_stack).
    ///
    /// From each task's switch-out to its switch-in (sched_switch), weighted in
    /// microseconds, with the stacks it left the cpu with: the kernel stack from
    /// __schedule() outwards, the user stack. Without --folded, --svg or --pprof, the
    /// folded stacks go to stdout.
    Offcputime {
        /// Seconds to record (fractions allowed, at most a day); Ctrl-C ends it early.
        #[arg(short, long, value_name = "SECONDS", default_value = "5", value_parser = limits::parse_duration)]
        duration: Duration,
        /// Only this process (all its threads); the whole system otherwise.
        #[arg(short, long)]
        pid: Option<u32>,
        /// Only intervals of at least this many microseconds (1 or more).
        #[arg(short = 'm', long, value_name = "MIN_US", default_value_t = 1)]
        min_block_time: u64,
        /// Only intervals of at most this many microseconds (whole ones, as bcc's:
        /// up to 999 ns more).
        #[arg(short = 'M', long, value_name = "MAX_US", default_value_t = u64::MAX / 1000)]
        max_block_time: u64,
        /// Only tasks that left the cpu in this state (task->__state, as bcc's --state:
        /// 0 runnable, 1 interruptible sleep, 2 uninterruptible, ...).
        #[arg(long, value_name = "STATE")]
        state: Option<u32>,
        /// Kernel stacks only.
        #[arg(short = 'K', long, conflicts_with = "user_only")]
        kernel_only: bool,
        /// User stacks only.
        #[arg(short = 'U', long)]
        user_only: bool,
        #[command(flatten)]
        out: Outputs,
    },
    /// Count calls to kernel functions, like bcc's funccount (needs rkf_multi).
    ///
    /// Every function matching a GLOB (`vfs_*`, `tcp_v4_*`, an exact name, or
    /// `MODULE:GLOB` for a module's) is attached through one rkf_multi link. Functions
    /// that cannot be traced honestly are left out of a glob, and counted by reason.
    Funccount {
        /// Function names or globs.
        #[arg(required = true)]
        globs: Vec<String>,
        /// Seconds to count (fractions allowed, at most a day); Ctrl-C ends it early.
        /// 5 by default; with `-i`, a day: until Ctrl-C, as bcc's funccount -i.
        #[arg(short, long, value_name = "SECONDS", value_parser = limits::parse_duration)]
        duration: Option<Duration>,
        /// Only calls of this process (all its threads); the whole system's otherwise.
        #[arg(short, long)]
        pid: Option<u32>,
        /// Print the calls of each interval of this many seconds as it ends (fractions
        /// allowed), instead of the calls of the whole duration at its end.
        #[arg(short, long, value_name = "SECONDS", value_parser = limits::parse_interval)]
        interval: Option<Duration>,
        /// Print the N most called functions.
        #[arg(short = 'n', long, default_value_t = 20)]
        top: usize,
    },
    /// Time calls of kernel functions, a log2 histogram per function, like bcc's
    /// funclatency (needs rkf_multi).
    ///
    /// One rkf_multi session program on every function matching a GLOB (`vfs_*`, an exact
    /// name, `MODULE:GLOB`) times each call from entry to exit, nested calls each whole.
    /// Functions that cannot be traced honestly are left out of a glob, and counted by
    /// reason.
    Funclatency {
        /// Function names or globs.
        #[arg(required = true)]
        globs: Vec<String>,
        /// Seconds to record (fractions allowed, at most a day); Ctrl-C ends it early.
        #[arg(short, long, value_name = "SECONDS", default_value = "5", value_parser = limits::parse_duration)]
        duration: Duration,
        /// Only calls of this process (all its threads); the whole system's otherwise.
        #[arg(short, long)]
        pid: Option<u32>,
        /// Histograms in milliseconds.
        #[arg(short = 'm', long, group = "unit")]
        milliseconds: bool,
        /// Histograms in microseconds.
        #[arg(short = 'u', long, group = "unit")]
        microseconds: bool,
        /// Histograms in nanoseconds (the default).
        #[arg(short = 'n', long, group = "unit")]
        nanoseconds: bool,
        /// Print the histograms of the N most called functions.
        #[arg(short = 'T', long, value_name = "N", default_value_t = 10)]
        top: usize,
    },
    /// List the rkf_multi links: program, functions, hits and misses.
    Links {
        /// Also list each link's functions.
        #[arg(short, long)]
        verbose: bool,
    },
}

/// Where a stack profile goes.
#[derive(Args)]
struct Outputs {
    /// Write the folded stacks (stackcollapse format, kernel frames marked `_[k]`) to
    /// this file.
    #[arg(long, value_name = "FILE")]
    folded: Option<PathBuf>,
    /// Write a flame graph (SVG, kernel frames in orange) to this file.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Write a gzipped pprof profile (for `go tool pprof`, Pyroscope, Grafana) to this
    /// file.
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,
}

impl Outputs {
    /// Writes `stacks` where asked, or the folded stacks to stdout when nowhere is.
    fn write(&self, stacks: &Stacks, tool: &str, title: &str) -> Result<()> {
        let write = |path: &PathBuf, what: &str, data: &[u8]| -> Result<()> {
            std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("rkf {tool}: {what} in {}", path.display());
            Ok(())
        };
        if self.folded.is_none() && self.svg.is_none() && self.pprof.is_none() {
            print!("{}", stacks.folded());
        }
        if let Some(path) = &self.folded {
            write(path, "folded stacks", stacks.folded().as_bytes())?;
        }
        if let Some(path) = &self.pprof {
            write(path, "pprof profile", &stacks.pprof()?)?;
        }
        match &self.svg {
            // A recording that took no stack (one ended at once by Ctrl-C, an idle -p)
            // has nothing to draw: said, not an error, as the other outputs hold it.
            Some(path) if stacks.is_empty() => {
                eprintln!(
                    "rkf {tool}: no stacks recorded: no flame graph written to {}",
                    path.display()
                );
            }
            Some(path) => write(path, "flame graph", &stacks.flamegraph(title)?)?,
            None => {}
        }
        Ok(())
    }
}

fn main() -> Result<()> {
    // Output piped into `head` ends the process quietly, as with other Unix tools, instead
    // of a panic in println!().
    // SAFETY: restoring the default action of a signal, before any thread is started.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cmd = Cli::parse().cmd;
    // A timed command ends early on Ctrl-C (or SIGTERM) and prints what it has, as bcc's
    // tools do; a second one ends it at once.
    if !matches!(cmd, Cmd::Percpu { .. } | Cmd::Links { .. }) {
        rkf::interrupt::on_signals()?;
    }
    match cmd {
        Cmd::Percpu { spec, addr, hex } => cmd_percpu(&spec, addr, hex),
        Cmd::Profile {
            frequency,
            duration,
            pid,
            kernel_only,
            user_only,
            idle,
            out,
        } => {
            let opts = profile::Options {
                frequency,
                duration,
                pid,
                kernel: !user_only,
                user: !kernel_only,
                include_idle: idle,
            };
            cmd_profile(&opts, &out)
        }
        Cmd::Offcputime {
            duration,
            pid,
            min_block_time,
            max_block_time,
            state,
            kernel_only,
            user_only,
            out,
        } => {
            let opts = offcpu::Options {
                duration,
                pid,
                min_us: min_block_time,
                max_us: max_block_time,
                state,
                kernel: !user_only,
                user: !kernel_only,
            };
            cmd_offcputime(&opts, &out)
        }
        Cmd::Funccount {
            globs,
            duration,
            pid,
            interval,
            top,
        } => {
            let opts = funccount::Options {
                duration: duration.unwrap_or(if interval.is_some() {
                    limits::MAX_DURATION
                } else {
                    Duration::from_secs(5)
                }),
                pid,
                interval,
            };
            cmd_funccount(&globs, &opts, top, duration.is_none() && interval.is_some())
        }
        Cmd::Funclatency {
            globs,
            duration,
            pid,
            milliseconds,
            microseconds,
            nanoseconds: _,
            top,
        } => {
            let opts = funclatency::Options {
                duration,
                unit: unit_of(milliseconds, microseconds),
                pid,
            };
            cmd_funclatency(&globs, &opts, top)
        }
        Cmd::Links { verbose } => cmd_links(verbose),
    }
}

/// `rkf funccount`; `until_interrupted`: no `-d` was given with `-i`, which then counts
/// until Ctrl-C (at most a day).
fn cmd_funccount(
    globs: &[String],
    opts: &funccount::Options,
    top: usize,
    until_interrupted: bool,
) -> Result<()> {
    let pats: Vec<&str> = globs.iter().map(String::as_str).collect();
    let attached = |a: &funccount::Attached| {
        let skipped: usize = a.skipped.values().map(Vec::len).sum();
        format!(
            "attached to {} functions in {:.1} ms ({skipped} left out)",
            a.funcs,
            a.time.as_secs_f64() * 1e3,
        )
    };
    let left_out = |a: &funccount::Attached| {
        for (why, names) in &a.skipped {
            println!("  left out {}: {why} (e.g. {})", names.len(), names[0]);
        }
    };
    let c = funccount::count_with(
        &pats,
        opts,
        |a| {
            // With intervals, what was attached comes first; without, with the counts.
            if let Some(i) = opts.interval {
                println!("{}", attached(a));
                left_out(a);
                let until = if until_interrupted {
                    "until Ctrl-C".to_string()
                } else {
                    format!("for {} s", secs(opts.duration))
                };
                println!(
                    "counting calls of {} every {} s {until}",
                    who(opts.pid),
                    secs(i)
                );
            }
        },
        |i| {
            println!("\nat {} s:", secs(i.end));
            print_counts(&i.counts, top);
            Ok(())
        },
    )?;
    let counted = format!("counted for {} s ({})", secs(c.duration), who(c.pid));
    if opts.interval.is_some() {
        println!("\n{counted}");
    } else {
        println!("{}, {counted}", attached(&c.attach));
        left_out(&c.attach);
        print_counts(&c.counts, top);
    }
    if c.missed > 0 || c.unknown > 0 {
        println!(
            "{} runs missed (recursion), {} runs on a function without a counter",
            c.missed, c.unknown
        );
    }
    Ok(())
}

/// `d` in seconds, to the millisecond, without trailing zeros: `1`, `2.5`, `0.01`.
fn secs(d: Duration) -> String {
    let s = format!("{:.3}", d.as_secs_f64());
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The `top` most called of `counts` (most called first), and how many more were called.
fn print_counts(counts: &[(String, u64)], top: usize) {
    let mut table = Columns::new(1, &[("FUNC", Left, 40), ("COUNT", Right, 12)]);
    for (name, n) in counts.iter().take(top) {
        table.row([name.clone(), n.to_string()]);
    }
    table.print();
    if counts.len() > top {
        println!("... {} more functions were called", counts.len() - top);
    }
}

/// The unit `-m` or `-u` asks for; nanoseconds without either (`-n`).
fn unit_of(milliseconds: bool, microseconds: bool) -> funclatency::Unit {
    match (milliseconds, microseconds) {
        (true, _) => funclatency::Unit::Msecs,
        (_, true) => funclatency::Unit::Usecs,
        _ => funclatency::Unit::Nsecs,
    }
}

fn cmd_funclatency(globs: &[String], opts: &funclatency::Options, top: usize) -> Result<()> {
    opts.validate()?;
    let pats: Vec<&str> = globs.iter().map(String::as_str).collect();
    let l = funclatency::record(&pats, opts)?;
    print!("{}", l.report(top));
    Ok(())
}

fn cmd_links(verbose: bool) -> Result<()> {
    let links = rkf::multi::links()?;
    if links.is_empty() {
        println!("no rkf_multi links");
        return Ok(());
    }
    // Without the symbol table (no root), the functions are shown as addresses.
    let ksyms = verbose
        .then(rkf::kallsyms::Kallsyms::load)
        .and_then(Result::ok);
    let by_addr = ksyms
        .as_ref()
        .map(rkf::kallsyms::Kallsyms::functions_by_addr)
        .unwrap_or_default();
    let mut table = Columns::new(
        1,
        &[
            ("LINK", Right, 6),
            ("PROG", Right, 8),
            ("TYPE", Left, 6),
            ("FUNCS", Right, 7),
            ("HITS", Right, 12),
            ("MISSES", Right, 8),
        ],
    );
    let mut funcs = Columns::new(
        1,
        &[
            ("LINK", Right, 6),
            ("FUNC", Left, 40),
            ("HITS", Right, 12),
            ("MISSES", Right, 8),
            ("COOKIE", Right, 8),
        ],
    );
    for l in &links {
        // A link that does not count (the default) has no hits or misses to show.
        let count = |n: u64| {
            if l.counted {
                n.to_string()
            } else {
                "-".to_string()
            }
        };
        let (hits, misses) = l.counts().unwrap_or_default();
        let kind = l.kind.name();
        table.row([
            l.id.to_string(),
            l.prog_id.to_string(),
            kind.to_string(),
            l.funcs.len().to_string(),
            count(hits),
            count(misses),
        ]);
        for f in l.funcs.iter().filter(|_| verbose) {
            let name = by_addr.get(&f.addr).map_or_else(
                || format!("{:#x}", f.addr),
                |s| rkf::multi::qualified_name(&s.name, s.module.as_deref()),
            );
            funcs.row([
                l.id.to_string(),
                name,
                count(f.hits),
                count(f.misses),
                format!("{:#x}", f.cookie),
            ]);
        }
    }
    table.print();
    if verbose {
        println!();
        funcs.print();
    }
    Ok(())
}

/// Whom a stack tool follows, for its messages and titles.
fn who(pid: Option<u32>) -> String {
    pid.map_or_else(|| "all tasks".to_string(), |p| format!("pid {p}"))
}

fn cmd_profile(opts: &profile::Options, out: &Outputs) -> Result<()> {
    opts.validate()?;
    let p = profile::record(opts)?;
    let who = who(opts.pid);
    // What it recorded for: less than asked if Ctrl-C ended it.
    let secs = p.stacks.duration_ns as f64 / 1e9;
    eprintln!(
        "rkf profile: {} samples of {who} on {} cpus at {} Hz for {:.1} s, {} distinct stacks, {} dropped, {} stacks not taken",
        p.samples,
        p.cpus,
        opts.frequency,
        secs,
        p.stacks.len(),
        p.dropped,
        p.stack_errors
    );
    let title = format!("rkf profile: {who}, {} Hz, {secs:.1} s", opts.frequency);
    out.write(&p.stacks, "profile", &title)
}

fn cmd_offcputime(opts: &offcpu::Options, out: &Outputs) -> Result<()> {
    opts.validate()?;
    let o = offcpu::record(opts)?;
    let who = who(opts.pid);
    // What it recorded for: less than asked if Ctrl-C ended it.
    let secs = o.stacks.duration_ns as f64 / 1e9;
    let total_us: u64 = o.stacks.stacks.values().map(|c| c.value).sum();
    eprintln!(
        "rkf offcputime: {} intervals of {who} in {:.1} s, {:.3} s off-CPU in all, {} distinct stacks, {} dropped, {} untracked, {} stacks not taken",
        o.intervals,
        secs,
        total_us as f64 / 1e6,
        o.stacks.len(),
        o.dropped,
        o.untracked,
        o.stack_errors
    );
    let title = format!(
        "rkf offcputime: {who}, {secs:.1} s, intervals of {} us or more",
        opts.min_us
    );
    out.write(&o.stacks, "offcputime", &title)
}

/// One column of the table: a target and what was read of it on each cpu.
struct Column {
    title: String,
    target: Target,
    readings: Vec<Reading>,
}

fn cmd_percpu(spec: &str, show_addr: bool, hex: bool) -> Result<()> {
    let target = Target::resolve(spec)?;
    let f = &target.field;
    let owner = target.var.module.as_deref().unwrap_or("vmlinux");
    println!(
        "{} ({}, {} bytes at +{:#x} of {} {}, {owner})",
        target.spec(),
        f.type_name,
        f.size,
        f.offset,
        target.var.type_name,
        target.var.name,
    );

    let is_aggregate = f.kind == ValueKind::Bytes && !f.members.is_empty();
    if is_aggregate && f.size > MAX_VALUE {
        bail!(
            "{} is {} bytes, too large to print whole; name a field: {}",
            f.type_name,
            f.size,
            f.members.join(", ")
        );
    }
    let targets: Vec<(String, Target)> = if is_aggregate {
        let spec = target.spec();
        f.members
            .iter()
            .map(|m| Ok((m.clone(), Target::resolve(&format!("{spec}.{m}"))?)))
            .collect::<Result<_>>()?
    } else {
        vec![("VALUE".to_owned(), target)]
    };
    let columns: Vec<Column> = targets
        .into_iter()
        .map(|(title, target)| {
            let readings = percpu::read(&target)?;
            Ok(Column {
                title: title.to_uppercase(),
                target,
                readings,
            })
        })
        .collect::<Result<_>>()?;

    let cell = |c: &Column, i: usize| match &c.readings[i].value {
        Ok(bytes) => percpu::format_value(c.target.field.kind, bytes, hex),
        Err(e) => format!("<read error {e}>"),
    };
    let mut spec = vec![("CPU", Right, 5)];
    if show_addr {
        spec.push(("ADDRESS", Right, 18));
    }
    spec.extend(columns.iter().map(|c| (c.title.as_str(), Right, 12)));
    let mut table = Columns::new(2, &spec);
    for (i, reading) in columns[0].readings.iter().enumerate() {
        let mut row = vec![reading.cpu.to_string()];
        if show_addr {
            row.push(format!("{:#x}", reading.addr));
        }
        row.extend(columns.iter().map(|c| cell(c, i)));
        table.row(row);
    }
    table.print();
    Ok(())
}

/// A table as perf and bcc print them: a header line, then aligned columns, without
/// borders; each column at least as wide as given.
struct Columns(comfy_table::Table);

impl Columns {
    /// A table of `columns` (title, alignment, least width), `gap` spaces apart.
    fn new(gap: u16, columns: &[(&str, comfy_table::CellAlignment, u16)]) -> Self {
        use comfy_table::{ColumnConstraint::LowerBoundary, Width::Fixed};

        let mut t = comfy_table::Table::new();
        t.load_style(comfy_table::presets::NOTHING);
        t.set_header(columns.iter().map(|c| c.0).collect::<Vec<_>>());
        for (i, (col, &(_, align, width))) in t.column_iter_mut().zip(columns).enumerate() {
            // The gap goes before every column but the first; widths include it.
            let pad = if i == 0 { 0 } else { gap };
            col.set_cell_alignment(align);
            col.set_padding((pad, 0))
                .set_constraint(LowerBoundary(Fixed(width + pad)));
        }
        Self(t)
    }

    /// Adds a row.
    fn row<T: Into<comfy_table::Cell>>(&mut self, cells: impl IntoIterator<Item = T>) {
        self.0
            .add_row(cells.into_iter().map(Into::into).collect::<Vec<_>>());
    }

    /// Prints the table, without trailing blanks.
    fn print(&self) {
        println!("{}", self.0.trim_fmt());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seconds to the millisecond, without trailing zeros.
    #[test]
    fn seconds() {
        let ms = Duration::from_millis;
        assert_eq!(secs(ms(1_000)), "1");
        assert_eq!(secs(ms(2_500)), "2.5");
        assert_eq!(secs(ms(10)), "0.01");
        assert_eq!(secs(ms(10_000)), "10");
        assert_eq!(secs(ms(0)), "0");
        assert_eq!(secs(Duration::from_micros(1_234_567)), "1.235");
    }

    /// The tables keep the layout of the format strings they replace.
    #[test]
    fn tables() {
        let mut t = Columns::new(1, &[("FUNC", Left, 40), ("COUNT", Right, 12)]);
        t.row(["vfs_read", "766"]);
        t.row(["vfs_open", "16"]);
        let old = [
            format!("{:<40} {:>12}", "FUNC", "COUNT"),
            format!("{:<40} {:>12}", "vfs_read", 766),
            format!("{:<40} {:>12}", "vfs_open", 16),
        ];
        assert_eq!(t.0.trim_fmt(), old.join("\n"));

        let mut t = Columns::new(
            2,
            &[
                ("CPU", Right, 5),
                ("ADDRESS", Right, 18),
                ("VALUE", Right, 12),
            ],
        );
        t.row(["0", "0xffff88807dc26f68", "0"]);
        t.row(["1", "0xffff88807dd26f68", "1"]);
        let old = [
            format!("{:>5}  {:>18}  {:>12}", "CPU", "ADDRESS", "VALUE"),
            format!("{:>5}  {:>#18x}  {:>12}", 0, 0xffff88807dc26f68u64, 0),
            format!("{:>5}  {:>#18x}  {:>12}", 1, 0xffff88807dd26f68u64, 1),
        ];
        assert_eq!(t.0.trim_fmt(), old.join("\n"));
    }

    /// `rkf funclatency`: one unit flag at most, nanoseconds by default, a GLOB needed.
    #[test]
    fn funclatency_options() {
        use rkf::funclatency::Unit::{Msecs, Nsecs, Usecs};

        let parse = |args: &[&str]| {
            let args = ["rkf", "funclatency"].iter().chain(args);
            match Cli::try_parse_from(args).map(|c| c.cmd) {
                Ok(Cmd::Funclatency {
                    milliseconds,
                    microseconds,
                    top,
                    ..
                }) => Ok((unit_of(milliseconds, microseconds), top)),
                Ok(_) => Err("another command".to_string()),
                Err(e) => Err(e.kind().to_string()),
            }
        };
        assert_eq!(parse(&["vfs_*"]), Ok((Nsecs, 10)));
        assert_eq!(parse(&["vfs_*", "-n", "-T", "3"]), Ok((Nsecs, 3)));
        assert_eq!(parse(&["-u", "vfs_*"]), Ok((Usecs, 10)));
        assert_eq!(parse(&["vfs_*", "--milliseconds"]), Ok((Msecs, 10)));
        let conflict = Err(
            "an argument cannot be used with one or more of the other specified arguments"
                .to_string(),
        );
        assert_eq!(parse(&["vfs_*", "-m", "-u"]), conflict);
        assert_eq!(parse(&["vfs_*", "-u", "-n"]), conflict);
        assert_eq!(
            parse(&["-u"]),
            Err("one or more required arguments were not provided".to_string())
        );
    }

    /// A cell wider than its column widens the column, where a format string would
    /// push the rest of its line out of line.
    #[test]
    fn wide_cells() {
        let long = "a_function_name_longer_than_forty_characters_x";
        let mut t = Columns::new(1, &[("FUNC", Left, 40), ("COUNT", Right, 12)]);
        t.row([long, "1"]);
        t.row(["short", "22"]);
        let w = long.len();
        let want = [
            format!("{:<w$} {:>12}", "FUNC", "COUNT"),
            format!("{long:<w$} {:>12}", 1),
            format!("{:<w$} {:>12}", "short", 22),
        ];
        assert_eq!(t.0.trim_fmt(), want.join("\n"));
    }
}
