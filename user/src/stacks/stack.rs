// SPDX-License-Identifier: GPL-2.0

//! Symbolised stacks and their counts, and the folded and flame graph forms of them.

use std::{collections::BTreeMap, sync::Arc};

use anyhow::{bail, Context, Result};
use inferno::flamegraph::{color::MultiPalette, Palette};

/// One frame of a symbolised stack.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Frame {
    /// The function; `[unknown]` where no symbol covers the address.
    pub name: Arc<str>,
    /// A kernel frame (else a user one).
    pub kernel: bool,
    /// The object the function is in: `[kernel.kallsyms]` for the kernel (as perf names
    /// it), the path of a user binary or library, or `[unknown]`.
    pub object: Arc<str>,
}

impl Frame {
    /// The frame in a folded line: its name as `folded_name()` gives it, and kernel
    /// frames marked `_[k]` as perf's stackcollapse marks them, so that flame graph
    /// palettes and diff tools tell them from user frames.
    pub fn folded(&self) -> String {
        let name = folded_name(&self.name);
        if self.kernel {
            name + "_[k]"
        } else {
            name
        }
    }
}

/// `name` as a part of a folded line: `;` (the separator of frames) becomes `:`, and a
/// control character (a task may name itself "a\nb" with `PR_SET_NAME`, which would
/// end the line) becomes `?`, as ps(1) shows it.
fn folded_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_control() => '?',
            c => c,
        })
        .collect()
}

/// A stack of one task: its command name, then its frames, outermost first (user frames,
/// then kernel frames).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stack {
    /// The task's command name.
    pub comm: String,
    /// Outermost first.
    pub frames: Vec<Frame>,
}

impl Stack {
    /// The stack as a line of folded stacks, without the count:
    /// `comm;outermost;...;innermost`, kernel frames marked `_[k]`.
    pub fn folded(&self) -> String {
        let mut line = folded_name(&self.comm);
        for f in &self.frames {
            line.push(';');
            line.push_str(&f.folded());
        }
        line
    }

    /// Whether the kernel frames run `path` in order, outermost first, each a caller
    /// (not necessarily the direct one) of the next.
    pub fn runs_kernel_path(&self, path: &[&str]) -> bool {
        let mut want = path.iter().peekable();
        for f in self.frames.iter().filter(|f| f.kernel) {
            if want.peek().is_some_and(|&&w| *f.name == *w) {
                want.next();
            }
        }
        want.peek().is_none()
    }

    /// The user frames, outermost first.
    pub fn user_frames(&self) -> impl Iterator<Item = &Frame> {
        self.frames.iter().filter(|f| !f.kernel)
    }
}

/// What a profile measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// On-CPU samples, each standing for `period_ns` of cpu time.
    OnCpu {
        /// Nanoseconds between samples on a cpu.
        period_ns: u64,
    },
    /// Off-CPU intervals, weighted by their length in microseconds.
    OffCpu,
}

/// How often a stack was seen, and what it weighs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Samples (on-CPU) or intervals (off-CPU).
    pub count: u64,
    /// Cpu nanoseconds (on-CPU) or off-CPU microseconds.
    pub value: u64,
}

impl Counts {
    /// One sample (on-CPU) or interval (off-CPU) that weighs `value`.
    pub fn one(value: u64) -> Self {
        Self { count: 1, value }
    }

    /// Adds `other` to these counts.
    pub fn add(&mut self, other: Counts) {
        self.count += other.count;
        self.value += other.value;
    }
}

/// Stacks and their counts.
#[derive(Clone, Debug)]
pub struct Stacks {
    /// What the counts measure.
    pub kind: Kind,
    /// Every distinct stack seen.
    pub stacks: BTreeMap<Stack, Counts>,
    /// Nanoseconds recorded.
    pub duration_ns: u64,
}

impl Stacks {
    /// No stacks yet.
    pub fn new(kind: Kind) -> Self {
        Self {
            kind,
            stacks: BTreeMap::new(),
            duration_ns: 0,
        }
    }

    /// Counts one sample of `stack`: `value` cpu nanoseconds or off-CPU microseconds.
    pub fn add(&mut self, stack: Stack, value: u64) {
        self.add_counts(stack, Counts::one(value));
    }

    /// Adds `counts` to those of `stack`.
    pub fn add_counts(&mut self, stack: Stack, counts: Counts) {
        self.stacks.entry(stack).or_default().add(counts);
    }

    /// Number of distinct stacks.
    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    /// Whether no stack was seen.
    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    /// The unit a folded line's number counts: samples on-CPU (as perf's and bcc's
    /// folded output), microseconds off-CPU (as bcc's offcputime -f).
    pub fn folded_unit(&self) -> &'static str {
        match self.kind {
            Kind::OnCpu { .. } => "samples",
            Kind::OffCpu => "us",
        }
    }

    fn folded_number(&self, c: &Counts) -> u64 {
        match self.kind {
            Kind::OnCpu { .. } => c.count,
            Kind::OffCpu => c.value,
        }
    }

    /// The folded stacks (the `stackcollapse` format): `comm;outermost;...;innermost N`
    /// per line, kernel frames marked `_[k]`.  Speedscope and Pyroscope read this format
    /// as it is, and inferno and flamegraph.pl draw it.
    pub fn folded(&self) -> String {
        let mut lines: BTreeMap<String, u64> = BTreeMap::new();
        for (s, c) in &self.stacks {
            *lines.entry(s.folded()).or_default() += self.folded_number(c);
        }
        lines.iter().map(|(l, n)| format!("{l} {n}\n")).collect()
    }

    /// A flame graph as SVG, rendered by inferno, kernel frames coloured apart (orange)
    /// from user frames by the `_[k]` marks, as flamegraph.pl's `--color=java` does.
    pub fn flamegraph(&self, title: &str) -> Result<Vec<u8>> {
        if self.stacks.is_empty() {
            bail!("no stacks: nothing to draw");
        }
        let folded = self.folded();
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = title.to_string();
        opts.count_name = self.folded_unit().to_string();
        opts.colors = Palette::Multi(MultiPalette::Java);
        let mut svg = Vec::new();
        inferno::flamegraph::from_lines(&mut opts, folded.lines(), &mut svg)
            .context("rendering the flame graph")?;
        Ok(svg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str, kernel: bool) -> Frame {
        Frame {
            name: name.into(),
            kernel,
            object: "[unknown]".into(),
        }
    }

    fn stack(comm: &str, frames: &[(&str, bool)]) -> Stack {
        Stack {
            comm: comm.into(),
            frames: frames.iter().map(|&(n, k)| frame(n, k)).collect(),
        }
    }

    #[test]
    fn folded_marks_kernel_frames_and_sums_equal_lines() {
        let mut s = Stacks::new(Kind::OffCpu);
        s.add(stack("cat", &[("main", false), ("ksys_read", true)]), 7);
        s.add(stack("cat", &[("main", false), ("ksys_read", true)]), 5);
        s.add(stack("a;b", &[("f;g", false)]), 1);
        s.add(stack("x\ny\tz\u{7f}", &[("k\r", true)]), 3);
        assert_eq!(
            s.folded(),
            "a:b;f:g 1\ncat;main;ksys_read_[k] 12\nx?y?z?;k?_[k] 3\n"
        );
        assert_eq!(s.len(), 3);

        let mut s = Stacks::new(Kind::OnCpu { period_ns: 10 });
        s.add(stack("cat", &[("ksys_read", true)]), 10);
        s.add(stack("cat", &[("ksys_read", true)]), 10);
        assert_eq!(s.folded(), "cat;ksys_read_[k] 2\n");
    }

    /// The `fill="rgb(r,g,b)"` of the frame titled `name` in an inferno SVG.
    fn fill(svg: &str, name: &str) -> (u8, u8, u8) {
        let g = &svg[svg.find(&format!("<title>{name} (")).unwrap()..];
        let rgb = &g[g.find("fill=\"rgb(").unwrap() + 10..];
        let v: Vec<u8> = rgb[..rgb.find(')').unwrap()]
            .split(',')
            .map(|c| c.parse().unwrap())
            .collect();
        (v[0], v[1], v[2])
    }

    #[test]
    fn flamegraph_colours_kernel_frames_apart() {
        let mut s = Stacks::new(Kind::OffCpu);
        s.add(stack("cat", &[("main", false), ("ksys_read", true)]), 5);
        let svg = String::from_utf8(s.flamegraph("t").unwrap()).unwrap();
        // The `_[k]` mark chooses the colour and is not shown.
        assert!(!svg.contains("_[k]"));
        // Orange (inferno's BasicPalette::Orange: no blue) for the kernel frame, red
        // (green and blue alike, below red) for the user one.
        let (r, g, b) = fill(&svg, "ksys_read");
        assert!(b == 0 && r > g, "ksys_read is rgb({r},{g},{b})");
        let (r, g, b) = fill(&svg, "main");
        assert!(g == b && r > g, "main is rgb({r},{g},{b})");
    }

    #[test]
    fn kernel_path_in_order() {
        let s = stack(
            "cat",
            &[
                ("ksys_read", false),
                ("ksys_read", true),
                ("vfs_read", true),
                ("pipe_read", true),
                ("schedule", true),
            ],
        );
        assert!(s.runs_kernel_path(&["ksys_read", "pipe_read", "schedule"]));
        assert!(!s.runs_kernel_path(&["pipe_read", "ksys_read"]));
        assert!(!s.runs_kernel_path(&["vfs_write"]));
        assert_eq!(s.user_frames().count(), 1);
    }
}
