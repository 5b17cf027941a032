// SPDX-License-Identifier: GPL-2.0

//! Shell-style globs over function names, as `rkf funccount 'vfs_*'` takes them.  User
//! space only: rkf_multi is given functions, never patterns.

/// Shell-style glob matching of `name` against `pat`: `*` (any run), `?` (one byte),
/// `[abc]`, `[a-z]` and `[!a-z]` (one byte of, or not of, a set), `\x` (a literal x).
///
/// Linear in practice: on a mismatch only the last `*` is retried.
pub fn glob_match(pat: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    // Where to resume after the last `*`: the pattern after it, and the name position.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pat.len() {
            match pat[p] {
                b'*' => {
                    star = Some((p + 1, n));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    n += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(&pat[p..], name[n]) {
                        if matched {
                            p += next;
                            n += 1;
                            continue;
                        }
                    } else if name[n] == b'[' {
                        // An unterminated class is a literal `[`.
                        p += 1;
                        n += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pat.len() => {
                    if pat[p + 1] == name[n] {
                        p += 2;
                        n += 1;
                        continue;
                    }
                }
                c => {
                    if c == name[n] {
                        p += 1;
                        n += 1;
                        continue;
                    }
                }
            }
        }
        // Mismatch: let the last `*` swallow one more byte, or fail.
        match star {
            Some((sp, sn)) => {
                star = Some((sp, sn + 1));
                p = sp;
                n = sn + 1;
            }
            None => return false,
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class at the start of `pat` (which starts with `[`).
/// Returns whether it matched and the length of the class, or `None` if the class is not
/// terminated.
fn class(pat: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(pat.get(i), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let &lo = pat.get(i)?;
        if lo == b']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if pat.get(i + 1) == Some(&b'-') && pat.get(i + 2).is_some_and(|&h| h != b']') {
            let hi = pat[i + 2];
            matched |= lo <= c && c <= hi;
            i += 3;
        } else {
            matched |= lo == c;
            i += 1;
        }
    }
}

/// Whether a glob has any special character (otherwise it names one function).
pub fn is_glob(pat: &[u8]) -> bool {
    pat.iter().any(|c| matches!(c, b'*' | b'?' | b'[' | b'\\'))
}
