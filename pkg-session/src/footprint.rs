//! What a tool call touches ([`Footprint`]), and which calls of a batch must therefore wait
//! for which: the batch's dependency graph.
//!
//! Two calls *conflict* when one writes a [`Place`] the other reads or writes, or when
//! either may touch anything. Of two conflicting calls in one batch, the later one (in the
//! model's call order) starts only once the earlier one has ended; calls that do not
//! conflict run in parallel. So a `read_file` sent after an `edit_file` of the same path
//! reads the edited text, and one sent before it reads the text as it was, every time.

use std::fmt;

/// A thing a call reads or writes: a file or directory, a table, a URL, anything a tool
/// names. Places are compared by segments: `a/b` lies inside `a` (a write of `a/b`
/// conflicts with a listing of `a`), while `a/bc` does not.
///
/// ```
/// use treadle_session::tool::Place;
///
/// let dir = Place::new("file:/work/step");
/// assert!(dir.overlaps(&Place::new("file:/work/step/a.txt")));
/// assert!(!Place::new("file:/work/a").overlaps(&Place::new("file:/work/ab")));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place(String);

impl Place {
    /// The place named `key`; a trailing `/` is dropped so `a/` and `a` are one place.
    pub fn new(key: impl Into<String>) -> Self {
        let mut key = key.into();
        while key.len() > 1 && key.ends_with('/') {
            key.pop();
        }
        Self(key)
    }

    /// The key, as given (less a trailing `/`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the two are the same place or one lies inside the other.
    pub fn overlaps(&self, other: &Place) -> bool {
        let (short, long) = if self.0.len() <= other.0.len() {
            (&self.0, &other.0)
        } else {
            (&other.0, &self.0)
        };
        long.strip_prefix(short.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || short.ends_with('/'))
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What one call of a tool touches ([`Tool::touches`](crate::Tool::touches)).
///
/// ```
/// use treadle_session::tool::{Footprint, Place};
///
/// let read = Footprint::reads(Place::new("file:/w/a.txt"));
/// let edit = Footprint::writes(Place::new("file:/w/a.txt"));
/// let other = Footprint::reads(Place::new("file:/w/b.txt"));
/// assert!(read.conflicts(&edit) && edit.conflicts(&read));
/// assert!(!read.conflicts(&other) && !read.conflicts(&read));
/// assert!(Footprint::Everything.conflicts(&Footprint::nothing()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Footprint {
    /// It may read or write anything: it runs after every call before it and before every
    /// call after it. What a tool that declares nothing is taken to touch.
    Everything,
    /// It reads and writes only these places.
    Only {
        /// What it reads.
        reads: Vec<Place>,
        /// What it writes (a write may also read).
        writes: Vec<Place>,
    },
}

impl Footprint {
    /// Touches nothing another call could see (a decision recorded in memory, a question).
    pub fn nothing() -> Self {
        Self::Only {
            reads: Vec::new(),
            writes: Vec::new(),
        }
    }

    /// Reads `place` only.
    pub fn reads(place: Place) -> Self {
        Self::Only {
            reads: vec![place],
            writes: Vec::new(),
        }
    }

    /// Writes (and may read) `place` only.
    pub fn writes(place: Place) -> Self {
        Self::Only {
            reads: Vec::new(),
            writes: vec![place],
        }
    }

    /// Whether the call may change something (anything, or a place it names).
    pub fn writes_anything(&self) -> bool {
        match self {
            Self::Everything => true,
            Self::Only { writes, .. } => !writes.is_empty(),
        }
    }

    /// Whether two calls with these footprints must run one after the other: one writes
    /// what the other reads or writes, or either may touch anything.
    pub fn conflicts(&self, other: &Footprint) -> bool {
        let (
            Self::Only {
                reads: my_reads,
                writes: my_writes,
            },
            Self::Only {
                reads: its_reads,
                writes: its_writes,
            },
        ) = (self, other)
        else {
            return true;
        };
        let hits = |writes: &[Place], places: &[Place]| {
            writes.iter().any(|w| places.iter().any(|p| w.overlaps(p)))
        };
        hits(my_writes, its_reads) || hits(my_writes, its_writes) || hits(its_writes, my_reads)
    }
}

/// For each call (by index), the earlier calls it must wait for: those whose footprint
/// conflicts with its own. `None` is a call that does not run (refused, settled), which
/// waits for nothing and is waited for by nothing. Every edge points to an earlier call, so
/// the graph has no cycle and the batch always finishes.
pub(crate) fn dependencies(footprints: &[Option<Footprint>]) -> Vec<Vec<usize>> {
    footprints
        .iter()
        .enumerate()
        .map(|(index, mine)| {
            let Some(mine) = mine else {
                return Vec::new();
            };
            footprints[..index]
                .iter()
                .enumerate()
                .filter(|(_, earlier)| earlier.as_ref().is_some_and(|e| e.conflicts(mine)))
                .map(|(at, _)| at)
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(key: &str) -> Place {
        Place::new(key)
    }

    #[test]
    fn places_overlap_by_segment() {
        assert!(place("f:/w").overlaps(&place("f:/w/a")));
        assert!(place("f:/w/a").overlaps(&place("f:/w")));
        assert!(place("f:/w/").overlaps(&place("f:/w")));
        assert!(!place("f:/w/a").overlaps(&place("f:/w/ab")));
        assert!(!place("f:/w/a").overlaps(&place("f:/w/b")));
        assert!(place("/").overlaps(&place("/x")));
    }

    #[test]
    fn reads_alone_never_conflict() {
        let a = Footprint::reads(place("f:/w/a"));
        let dir = Footprint::reads(place("f:/w"));
        assert!(!a.conflicts(&dir));
        assert!(Footprint::writes(place("f:/w/a")).conflicts(&dir));
        assert!(!Footprint::writes(place("f:/w/a")).conflicts(&Footprint::nothing()));
        assert!(Footprint::nothing().conflicts(&Footprint::Everything));
    }

    #[test]
    fn dependencies_point_back_to_conflicting_calls_only() {
        let calls = [
            Some(Footprint::reads(place("a"))),
            Some(Footprint::writes(place("a"))),
            Some(Footprint::reads(place("b"))),
            None,
            Some(Footprint::Everything),
            Some(Footprint::reads(place("b"))),
        ];
        assert_eq!(
            dependencies(&calls),
            vec![vec![], vec![0], vec![], vec![], vec![0, 1, 2], vec![4]]
        );
    }
}
