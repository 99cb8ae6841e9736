//! Which tables rows may be routed to (by a payload's route field or a
//! transform's row): the sink's own table, and tables matching the config's
//! `allowed_tables` patterns; never the dead-letter table. Names that could
//! not be had are remembered for a while, so that a producer naming a
//! missing table does not cost an RPC per batch.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::schema::TablePath;

/// How long a table that could not be opened is not asked for again.
pub(crate) const UNKNOWN_TABLE_TTL: Duration = Duration::from_secs(30);

/// The most distinct routed tables one batch may name; rows for the tables
/// past it dead-letter their message.
pub(crate) const MAX_TABLES_PER_BATCH: usize = 64;

/// A `database.table` pattern where `*` stands for any run of characters
/// (within its part: a `*` never matches the dot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablePattern {
    database: String,
    table: String,
}

impl std::str::FromStr for TablePattern {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.split_once('.') {
            Some((database, table)) if !database.is_empty() && !table.is_empty() && !table.contains('.') => {
                Ok(Self {
                    database: database.to_string(),
                    table: table.to_string(),
                })
            }
            _ => Err(format!(
                "`{text}` is not a \"database.table\" pattern (`*` matches any characters, e.g. \"shop.orders_*\")"
            )),
        }
    }
}

impl TablePattern {
    /// Whether `path` matches.
    pub fn matches(&self, path: &TablePath) -> bool {
        glob(&self.database, &path.database) && glob(&self.table, &path.table)
    }
}

/// `*`-only glob matching, linear in the text for a pattern with few stars.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The routing policy of one writer.
#[derive(Debug, Default)]
pub(crate) struct Router {
    allowed: Vec<TablePattern>,
    dead_letter_table: Option<TablePath>,
    unknown: Mutex<HashMap<TablePath, (Instant, String)>>,
}

impl Router {
    /// Routes to tables matching `allowed`, never to `dead_letter_table`.
    pub(crate) fn new(allowed: Vec<TablePattern>, dead_letter_table: Option<TablePath>) -> Self {
        Self {
            allowed,
            dead_letter_table,
            unknown: Mutex::default(),
        }
    }

    /// Why rows may not go to `path` (other than the sink's own table), if they may not.
    pub(crate) fn refusal(&self, path: &TablePath) -> Option<String> {
        if self.dead_letter_table.as_ref() == Some(path) {
            return Some("it is the dead-letter table, which takes dead letters only".into());
        }
        if !self.allowed.iter().any(|p| p.matches(path)) {
            return Some(if self.allowed.is_empty() {
                "routing to other tables than the sink's needs `allowed_tables` patterns in the config".into()
            } else {
                "it matches none of the config's `allowed_tables` patterns".into()
            });
        }
        if let Some(reason) = self.recently_unknown(path) {
            return Some(format!("{reason} (not asked again for {UNKNOWN_TABLE_TTL:?})"));
        }
        None
    }

    fn recently_unknown(&self, path: &TablePath) -> Option<String> {
        let mut unknown = self.unknown.lock().unwrap_or_else(|e| e.into_inner());
        match unknown.get(path) {
            Some((at, reason)) if at.elapsed() < UNKNOWN_TABLE_TTL => Some(reason.clone()),
            Some(_) => {
                unknown.remove(path);
                None
            }
            None => None,
        }
    }

    /// Remembers that `path` could not be had, and why.
    pub(crate) fn remember_unknown(&self, path: &TablePath, reason: &str) {
        let mut unknown = self.unknown.lock().unwrap_or_else(|e| e.into_inner());
        if unknown.len() >= 10_000 {
            unknown.retain(|_, (at, _)| at.elapsed() < UNKNOWN_TABLE_TTL);
        }
        unknown.insert(path.clone(), (Instant::now(), reason.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> TablePath {
        text.parse().unwrap()
    }

    #[test]
    fn patterns_match_by_part_with_stars() {
        let p: TablePattern = "shop.orders_*".parse().unwrap();
        assert!(p.matches(&path("shop.orders_eu")));
        assert!(p.matches(&path("shop.orders_")));
        assert!(!p.matches(&path("shop.order")));
        assert!(!p.matches(&path("other.orders_eu")));
        let any: TablePattern = "*.*".parse().unwrap();
        assert!(any.matches(&path("a.b")));
        let mid: TablePattern = "t*_*x.a*b*c".parse().unwrap();
        assert!(mid.matches(&path("t1_2x.abc")));
        assert!(mid.matches(&path("t_x.a--b--c")));
        assert!(!mid.matches(&path("t_x.acb")));
        assert!("nodot".parse::<TablePattern>().is_err());
        assert!("a.b.c".parse::<TablePattern>().is_err());
    }

    #[test]
    fn only_allowed_tables_are_reachable_and_never_the_dead_letter_table() {
        let dlq = path("shop.orders_dlq");
        let router = Router::new(vec!["shop.orders_*".parse().unwrap()], Some(dlq.clone()));
        assert_eq!(router.refusal(&path("shop.orders_eu")), None);
        assert!(router.refusal(&dlq).unwrap().contains("dead-letter table"));
        assert!(
            router
                .refusal(&path("shop.users"))
                .unwrap()
                .contains("allowed_tables")
        );
        let closed = Router::new(vec![], None);
        assert!(
            closed
                .refusal(&path("shop.orders_eu"))
                .unwrap()
                .contains("needs `allowed_tables`")
        );
    }

    #[test]
    fn unknown_tables_are_remembered() {
        let router = Router::new(vec!["*.*".parse().unwrap()], None);
        let missing = path("shop.gone");
        assert_eq!(router.refusal(&missing), None);
        router.remember_unknown(&missing, "table shop.gone: does not exist");
        let reason = router.refusal(&missing).unwrap();
        assert!(
            reason.contains("does not exist") && reason.contains("not asked again"),
            "{reason}"
        );
    }
}
