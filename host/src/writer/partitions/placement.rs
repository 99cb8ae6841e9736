//! Where a chunk's rows go on a partitioned table: grouped by partition in
//! order of first appearance, and the messages none of whose rows can be
//! written (a row without a partition, or in one that cannot be had) set
//! apart whole, with why.

use std::collections::{HashMap, HashSet};

use crate::schema::TablePath;
use crate::writer::partitions::RowPartitions;

/// Where the rows of one chunk go on a partitioned table.
#[derive(Debug, Default, PartialEq)]
pub(in crate::writer) struct Placement {
    /// Each partition's rows (indexes into the chunk), partitions in order of
    /// first appearance, rows in order.
    pub groups: Vec<(String, Vec<u32>)>,
    /// Messages none of whose rows are written, with why (the first reason
    /// one of its rows gave).
    pub unplaced: Vec<(u32, String)>,
}

/// Places a chunk's rows: `partitions` says each row's partition (or why
/// it has none), `messages[i]` is row i's message. A message with a row
/// that has no partition, or one in a partition `refused` (with the
/// reason), is unplaced whole: none of its rows are in any group.
pub(in crate::writer) fn place(
    partitions: &RowPartitions,
    messages: &[u32],
    refused: &HashMap<String, String>,
    table: &TablePath,
) -> Placement {
    // Why each partition's rows cannot be written, for those that cannot.
    let unwritable: Vec<Option<String>> = partitions
        .names
        .iter()
        .map(|name| match name {
            Err(reason) => Some(format!("table {table}: {reason}")),
            Ok(name) => refused.get(name).cloned(),
        })
        .collect();
    let mut placement = Placement::default();
    let mut unplaced: HashSet<u32> = HashSet::new();
    let is_unplaced =
        |unplaced: &HashSet<u32>, message: &u32| !unplaced.is_empty() && unplaced.contains(message);
    if unwritable.iter().any(Option::is_some) {
        for (&entry, &message) in partitions.of_row.iter().zip(messages) {
            if let Some(reason) = &unwritable[entry as usize]
                && unplaced.insert(message)
            {
                placement.unplaced.push((message, reason.clone()));
            }
        }
    }
    // Each partition's group in `placement.groups`, once it has one.
    let mut group_of: Vec<Option<usize>> = vec![None; partitions.names.len()];
    for (row, (&entry, message)) in partitions.of_row.iter().zip(messages).enumerate() {
        let Ok(name) = &partitions.names[entry as usize] else {
            continue;
        };
        if is_unplaced(&unplaced, message) {
            continue;
        }
        let group = *group_of[entry as usize].get_or_insert_with(|| {
            placement.groups.push((name.clone(), Vec::new()));
            placement.groups.len() - 1
        });
        placement.groups[group].1.push(row as u32);
    }
    placement
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> TablePath {
        TablePath {
            database: "db".into(),
            table: "t".into(),
        }
    }

    /// The partitions of rows named `names`, one entry per distinct name.
    fn partitions_of(names: Vec<Result<String, String>>) -> RowPartitions {
        let mut partitions = RowPartitions::default();
        for name in names {
            let entry = match partitions.names.iter().position(|n| *n == name) {
                Some(entry) => entry,
                None => {
                    partitions.names.push(name);
                    partitions.names.len() - 1
                }
            };
            partitions.of_row.push(entry as u32);
        }
        partitions
    }

    #[test]
    fn rows_are_grouped_by_partition_in_order_of_first_appearance() {
        let names: Vec<Result<String, String>> = ["eu", "us", "eu", "ap", "us"]
            .iter()
            .map(|n| Ok(n.to_string()))
            .collect();
        let placement = place(&partitions_of(names), &[0, 1, 2, 3, 4], &HashMap::new(), &path());
        assert_eq!(
            placement,
            Placement {
                groups: vec![
                    ("eu".into(), vec![0, 2]),
                    ("us".into(), vec![1, 4]),
                    ("ap".into(), vec![3]),
                ],
                unplaced: vec![],
            }
        );
    }

    #[test]
    fn a_message_with_one_unplaceable_row_is_unplaced_whole() {
        // Message 1 has rows 1 and 2: row 2's partition is refused, so row 1
        // (in a partition that exists) is not written either.
        let names: Vec<Result<String, String>> = vec![
            Ok("eu".into()),
            Ok("eu".into()),
            Ok("gone".into()),
            Err("partition key `region`: the value is NULL, and a partition key cannot be".into()),
            Ok("us".into()),
        ];
        let refused = HashMap::from([("gone".to_string(), "partition `gone` does not exist".to_string())]);
        let placement = place(&partitions_of(names), &[0, 1, 1, 2, 3], &refused, &path());
        assert_eq!(
            placement.groups,
            vec![("eu".into(), vec![0]), ("us".into(), vec![4])]
        );
        assert_eq!(
            placement.unplaced,
            vec![
                (1, "partition `gone` does not exist".to_string()),
                (
                    2,
                    "table db.t: partition key `region`: the value is NULL, and a partition key cannot be"
                        .to_string()
                ),
            ]
        );
    }
}
