//! Actor paths: `/user/parent/child`.

use std::borrow::{Borrow, Cow};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

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

    /// True if `name` may be given to an actor (`Props::with_name`): not
    /// empty, not starting with `$` (generated names), and made of ASCII
    /// letters, digits and `-_.*+:@&=,!~';`.
    ///
    /// ```
    /// use troupe_core::ActorPath;
    /// assert!(ActorPath::is_valid_name("worker-1"));
    /// assert!(!ActorPath::is_valid_name("a/b"));
    /// ```
    pub fn is_valid_name(name: &str) -> bool {
        valid_name(name)
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

/// An actor's name as its cell keeps it: a generated name is kept as its
/// number and only formatted when it is needed as text, so an anonymous
/// actor costs no allocation for its name.
#[derive(Clone)]
pub(crate) enum Name {
    /// Chosen by the user (never starts with `$`, except the name of a
    /// stillborn actor, which has no parent to be looked up in).
    Given(Arc<str>),
    /// `generated_name(n)`.
    Generated(u64),
}

/// A name to look up: text, or the number of a generated name.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum NameKey<'a> {
    Given(&'a str),
    Generated(u64),
}

impl<'a> NameKey<'a> {
    /// The key of a name written as text.
    pub(crate) fn of(name: &'a str) -> Self {
        if let Some(digits) = name.strip_prefix('$') {
            if let Ok(n) = u64::from_str_radix(digits, 36) {
                // Only the canonical spelling is a generated name.
                if generated_name(n) == name {
                    return NameKey::Generated(n);
                }
            }
        }
        NameKey::Given(name)
    }
}

impl Name {
    pub(crate) fn as_str(&self) -> Cow<'_, str> {
        match self {
            Name::Given(s) => Cow::Borrowed(s),
            Name::Generated(n) => Cow::Owned(generated_name(*n)),
        }
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

/// What a `Name` and a `NameKey` have in common, so that a map keyed by
/// `Name` can be searched with a borrowed `NameKey`.
pub(crate) trait AsNameKey {
    fn key(&self) -> NameKey<'_>;
}

impl AsNameKey for Name {
    fn key(&self) -> NameKey<'_> {
        match self {
            Name::Given(s) => NameKey::Given(s),
            Name::Generated(n) => NameKey::Generated(*n),
        }
    }
}

impl AsNameKey for NameKey<'_> {
    fn key(&self) -> NameKey<'_> {
        *self
    }
}

impl<'a> Borrow<dyn AsNameKey + 'a> for Name {
    fn borrow(&self) -> &(dyn AsNameKey + 'a) {
        self
    }
}

impl PartialEq for dyn AsNameKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for dyn AsNameKey + '_ {}

impl Hash for dyn AsNameKey + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}

// `Name` hashes and compares as its key, as `Borrow` requires.
impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Name {}

impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
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
    fn name_keys() {
        use std::collections::HashMap;
        assert!(NameKey::of("$10") == NameKey::Generated(36));
        assert!(NameKey::of("$A") == NameKey::Given("$A"), "not canonical");
        assert!(NameKey::of("$") == NameKey::Given("$"));
        assert!(NameKey::of("worker") == NameKey::Given("worker"));
        let mut m: HashMap<Name, u32> = HashMap::new();
        m.insert(Name::Given("worker".into()), 1);
        m.insert(Name::Generated(36), 2);
        let get = |s: &str| m.get(&NameKey::of(s) as &dyn AsNameKey).copied();
        assert_eq!(get("worker"), Some(1));
        assert_eq!(get("$10"), Some(2));
        assert_eq!(get("$11"), None);
        assert_eq!(Name::Generated(36).to_string(), "$10");
        assert!(std::mem::size_of::<Name>() <= 24);
    }

    #[test]
    fn path_parts() {
        let p = ActorPath::from_names(["b", "a", "user"].into_iter());
        assert_eq!(p.as_str(), "/user/a/b");
        assert_eq!(p.name(), "b");
        assert_eq!(p.elements().collect::<Vec<_>>(), ["user", "a", "b"]);
    }
}
