// SPDX-License-Identifier: GPL-2.0

//! Stacks as pprof: a gzipped `perftools.profiles.Profile` (github.com/google/pprof,
//! proto/profile.proto), the format `go tool pprof`, Pyroscope and Grafana read.
//!
//! The message types are the pprof crate's (prost); this file only lays the stacks out in
//! them.  Each distinct frame is one location with one line of one function; each object
//! (`[kernel.kallsyms]`, a user binary) is one mapping, marked as already symbolised so
//! that readers do not look for the binaries.  The command name is a `comm` label of each
//! sample, as it is the root frame of a folded stack.

use std::{collections::HashMap, io::Write, time::SystemTime};

use anyhow::{Context, Result};
use flate2::{write::GzEncoder, Compression};
use pprof::protos::{
    Function, Label, Line, Location, Mapping, Message, Profile, Sample, ValueType,
};

use super::{Frame, Kind, Stacks};

/// The string table: index 0 is the empty string, as the format requires.
struct Strings {
    index: HashMap<String, i64>,
    table: Vec<String>,
}

impl Strings {
    fn new() -> Self {
        Self {
            index: HashMap::from([(String::new(), 0)]),
            table: vec![String::new()],
        }
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = i64::try_from(self.table.len()).expect("fewer than 2^63 strings");
        self.index.insert(s.to_string(), i);
        self.table.push(s.to_string());
        i
    }
}

/// The next id of a table whose ids start at 1.
fn next_id(len: usize) -> u64 {
    u64::try_from(len).expect("fewer than 2^64 entries") + 1
}

/// A `u64` count as pprof's `int64`, saturated.
fn int64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

struct Builder {
    p: Profile,
    strings: Strings,
    mappings: HashMap<String, u64>,
    functions: HashMap<(String, String), u64>,
    locations: HashMap<Frame, u64>,
}

impl Builder {
    fn value_type(&mut self, ty: &str, unit: &str) -> ValueType {
        ValueType {
            ty: self.strings.get(ty),
            unit: self.strings.get(unit),
        }
    }

    fn mapping(&mut self, object: &str) -> u64 {
        if let Some(&id) = self.mappings.get(object) {
            return id;
        }
        let id = next_id(self.p.mapping.len());
        let filename = self.strings.get(object);
        self.p.mapping.push(Mapping {
            id,
            filename,
            has_functions: true,
            ..Mapping::default()
        });
        self.mappings.insert(object.to_string(), id);
        id
    }

    fn function(&mut self, f: &Frame) -> u64 {
        let key = (f.name.to_string(), f.object.to_string());
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = next_id(self.p.function.len());
        let name = self.strings.get(&f.name);
        self.p.function.push(Function {
            id,
            name,
            system_name: name,
            ..Function::default()
        });
        self.functions.insert(key, id);
        id
    }

    fn location(&mut self, f: &Frame) -> u64 {
        if let Some(&id) = self.locations.get(f) {
            return id;
        }
        let id = next_id(self.p.location.len());
        let mapping_id = self.mapping(&f.object);
        let function_id = self.function(f);
        self.p.location.push(Location {
            id,
            mapping_id,
            line: vec![Line {
                function_id,
                line: 0,
            }],
            ..Location::default()
        });
        self.locations.insert(f.clone(), id);
        id
    }
}

impl Stacks {
    /// The profile as gzipped pprof.  Sample types: `samples/count` and `cpu/nanoseconds`
    /// on-CPU (period: one sampling period of cpu time), `samples/count` and
    /// `off-cpu/microseconds` off-CPU.
    pub fn pprof(&self) -> Result<Vec<u8>> {
        let mut b = Builder {
            p: Profile::default(),
            strings: Strings::new(),
            mappings: HashMap::new(),
            functions: HashMap::new(),
            locations: HashMap::new(),
        };
        let count = b.value_type("samples", "count");
        let weight = match self.kind {
            Kind::OnCpu { period_ns } => {
                let cpu = b.value_type("cpu", "nanoseconds");
                b.p.period_type = Some(cpu.clone());
                b.p.period = int64(period_ns);
                cpu
            }
            Kind::OffCpu => b.value_type("off-cpu", "microseconds"),
        };
        b.p.sample_type = vec![count, weight];
        let comm_key = b.strings.get("comm");
        for (stack, c) in &self.stacks {
            // Leaf first, as the format orders a sample's locations.
            let location_id = stack.frames.iter().rev().map(|f| b.location(f)).collect();
            let comm = b.strings.get(&stack.comm);
            b.p.sample.push(Sample {
                location_id,
                value: vec![int64(c.count), int64(c.value)],
                label: vec![Label {
                    key: comm_key,
                    str: comm,
                    ..Label::default()
                }],
            });
        }
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .context("the clock is before 1970")?;
        b.p.duration_nanos = int64(self.duration_ns);
        b.p.time_nanos = int64(u64::try_from(now.as_nanos()).unwrap_or(u64::MAX))
            .saturating_sub(b.p.duration_nanos);
        b.p.string_table = b.strings.table;

        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&b.p.encode_to_vec())
            .context("compressing the profile")?;
        gz.finish().context("compressing the profile")
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use flate2::read::GzDecoder;

    use super::*;
    use crate::stacks::Stack;

    fn frame(name: &str, kernel: bool, object: &str) -> Frame {
        Frame {
            name: name.into(),
            kernel,
            object: object.into(),
        }
    }

    fn decode(gz: &[u8]) -> Profile {
        let mut raw = Vec::new();
        GzDecoder::new(gz).read_to_end(&mut raw).unwrap();
        Profile::decode(raw.as_slice()).unwrap()
    }

    #[test]
    fn layout() {
        let main = frame("main", false, "/usr/bin/cat");
        let read = frame("ksys_read", true, "[kernel.kallsyms]");
        let sched = frame("schedule", true, "[kernel.kallsyms]");
        let mut s = Stacks::new(Kind::OffCpu);
        let a = Stack {
            comm: "cat".into(),
            frames: vec![main.clone(), read.clone(), sched.clone()],
        };
        let b = Stack {
            comm: "dd".into(),
            frames: vec![read.clone()],
        };
        s.add(a.clone(), 100);
        s.add(a, 20);
        s.add(b, 7);
        s.duration_ns = 5;
        let p = decode(&s.pprof().unwrap());
        let str = |i: i64| p.string_table[usize::try_from(i).unwrap()].as_str();
        assert_eq!(str(0), "");
        let types: Vec<_> = p
            .sample_type
            .iter()
            .map(|t| (str(t.ty), str(t.unit)))
            .collect();
        assert_eq!(types, [("samples", "count"), ("off-cpu", "microseconds")]);
        assert_eq!(p.duration_nanos, 5);
        assert_eq!(p.mapping.len(), 2);
        assert!(p.mapping.iter().all(|m| m.has_functions));
        assert_eq!(p.function.len(), 3);
        assert_eq!(p.location.len(), 3);
        // Ids start at 1 and index their tables.
        for (i, l) in p.location.iter().enumerate() {
            assert_eq!(l.id, next_id(i));
        }
        let name_of = |loc: u64| {
            let l = &p.location[usize::try_from(loc - 1).unwrap()];
            let f = &p.function[usize::try_from(l.line[0].function_id - 1).unwrap()];
            let m = &p.mapping[usize::try_from(l.mapping_id - 1).unwrap()];
            (str(f.name), str(m.filename))
        };
        let samples: Vec<_> = p
            .sample
            .iter()
            .map(|s| {
                let names: Vec<_> = s.location_id.iter().map(|&l| name_of(l)).collect();
                (str(s.label[0].str), names, s.value.clone())
            })
            .collect();
        assert_eq!(
            samples,
            [
                (
                    "cat",
                    vec![
                        ("schedule", "[kernel.kallsyms]"),
                        ("ksys_read", "[kernel.kallsyms]"),
                        ("main", "/usr/bin/cat"),
                    ],
                    vec![2, 120]
                ),
                ("dd", vec![("ksys_read", "[kernel.kallsyms]")], vec![1, 7]),
            ]
        );
        assert!(p.sample.iter().all(|s| str(s.label[0].key) == "comm"));
    }

    #[test]
    fn on_cpu_period() {
        let mut s = Stacks::new(Kind::OnCpu {
            period_ns: 10_101_010,
        });
        s.add(
            Stack {
                comm: "dd".into(),
                frames: vec![frame("read_zero", true, "[kernel.kallsyms]")],
            },
            10_101_010,
        );
        let p = decode(&s.pprof().unwrap());
        let str = |i: i64| p.string_table[usize::try_from(i).unwrap()].as_str();
        let t = p.period_type.unwrap();
        assert_eq!((str(t.ty), str(t.unit)), ("cpu", "nanoseconds"));
        assert_eq!(p.period, 10_101_010);
        assert_eq!(str(p.sample_type[1].ty), "cpu");
        assert_eq!(p.sample[0].value, [1, 10_101_010]);
    }
}
