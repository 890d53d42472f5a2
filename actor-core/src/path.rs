//! Actor paths: `/user/parent/child`.

use std::fmt;

/// The path of an actor in its system's hierarchy, such as `/user/a/b`.
/// Top-level user actors live under `/user`, the runtime's own under
/// `/system`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorPath(String);

impl ActorPath {
    pub(crate) fn from_names<'a>(names: impl DoubleEndedIterator<Item = &'a str>) -> Self {
        let mut s = String::new();
        for n in names.rev() {
            s.push('/');
            s.push_str(n);
        }
        ActorPath(s)
    }

    pub(crate) fn from_string(s: String) -> Self {
        ActorPath(s)
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The last element: the actor's own name.
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or("")
    }

    /// The elements from the root, e.g. `["user", "a", "b"]`.
    pub fn elements(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|s| !s.is_empty())
    }
}

impl fmt::Display for ActorPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks a user-chosen actor name.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('$')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.*+:@&=,!~';".contains(c))
}

/// A generated name for the n-th anonymous actor: `$` and n in base 36.
pub(crate) fn generated_name(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut buf = [0u8; 14];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = DIGITS[(n % 36) as usize];
        n /= 36;
        if n == 0 {
            break;
        }
    }
    i -= 1;
    buf[i] = b'$';
    String::from_utf8_lossy(&buf[i..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("worker-1"));
        assert!(!valid_name(""));
        assert!(!valid_name("$a"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name("a b"));
        assert_eq!(generated_name(0), "$0");
        assert_eq!(generated_name(36), "$10");
    }

    #[test]
    fn path_parts() {
        let p = ActorPath::from_names(["b", "a", "user"].into_iter());
        assert_eq!(p.as_str(), "/user/a/b");
        assert_eq!(p.name(), "b");
        assert_eq!(p.elements().collect::<Vec<_>>(), ["user", "a", "b"]);
    }
}
