//! The [`aqueduct_subscribe::Sink`] of the SQL sinks (SQLite, PostgreSQL,
//! MariaDB), written once over [`SqlSink`]: a sink gives only its [`Sql`],
//! how it runs statements in a transaction and outside one, and whether
//! its DDL commits apart; [`sql_sink!`] makes of them its `Sink`
//! implementation and the public methods every SQL sink has.

use std::collections::BTreeMap;

use aqueduct_publish::{Lsn, ObjectSchema};
use aqueduct_subscribe::{Item, Record, Resume, SchemaPos, SinkError};

use crate::sql::{self, Ddl, Exec, Identity, Rows, Sql};

/// What differs between the SQL sinks.
pub(crate) trait SqlSink {
    /// Whether DDL commits implicitly (MariaDB), so it runs before the
    /// transaction it belongs to, each statement safe to repeat, and a
    /// batch is cut at its schema items ([`parts`]). Otherwise DDL runs in
    /// the transaction and a batch is one transaction.
    const DDL_APART: bool = false;

    /// The statements' dialect and names.
    fn sql(&self) -> &Sql;

    /// Runs `f` in one transaction, committed if it succeeds.
    fn in_transaction(
        &mut self,
        f: impl FnOnce(&Sql, &mut dyn Exec) -> Result<(), SinkError>,
    ) -> Result<(), SinkError>;

    /// Runs `f` outside a transaction.
    fn read<T>(
        &self,
        f: impl FnOnce(&Sql, &mut dyn Exec) -> Result<T, SinkError>,
    ) -> Result<T, SinkError>;
}

/// Where DDL commits apart, runs the DDL `ddl` collects, outside a
/// transaction; elsewhere does nothing (the DDL is in the transaction).
fn ddl_first<S: SqlSink>(
    sink: &S,
    ddl: impl FnOnce(&Sql, &mut dyn Exec) -> Result<Vec<Ddl>, SinkError>,
) -> Result<(), SinkError> {
    if !S::DDL_APART {
        return Ok(());
    }
    sink.read(|sql, db| {
        let ddl = ddl(sql, db)?;
        sql::run_ddl(db, &ddl)
    })
}

/// One transaction of a batch: its DDL first where that commits apart,
/// then its rows and `record`.
fn apply_part<S: SqlSink>(sink: &mut S, items: &[Item], record: &Record) -> Result<(), SinkError> {
    ddl_first(sink, |sql, db| sql::ddl_of(sql, db, items))?;
    sink.in_transaction(|sql, db| sql::apply(sql, db, items, record))
}

/// [`aqueduct_subscribe::Sink::apply`]: one transaction, or where DDL
/// commits apart one per part of the batch.
pub(crate) fn apply<S: SqlSink>(
    sink: &mut S,
    items: &[Item],
    record: &Record,
) -> Result<(), SinkError> {
    if !S::DDL_APART {
        return apply_part(sink, items, record);
    }
    for (part, rec) in parts(items, record) {
        apply_part(sink, part, &rec)?;
    }
    Ok(())
}

/// [`aqueduct_subscribe::Sink::store_position`].
pub(crate) fn store_position<S: SqlSink>(
    sink: &mut S,
    watermark: Lsn,
    schema: Option<SchemaPos>,
) -> Result<(), SinkError> {
    sink.in_transaction(|sql, db| sql::store_position(sql, db, watermark, schema))
}

/// [`aqueduct_subscribe::Sink::store_dead_letter`].
pub(crate) fn store_dead_letter<S: SqlSink>(
    sink: &mut S,
    lsn: Lsn,
    error: &SinkError,
    attempts: u32,
) -> Result<(), SinkError> {
    let s = sink.sql().dead_letter(lsn, error, attempts);
    sink.in_transaction(|_, db| db.exec(&s))
}

/// [`aqueduct_subscribe::Sink::clear_dead_letter`].
pub(crate) fn clear_dead_letter<S: SqlSink>(sink: &mut S, lsn: Lsn) -> Result<(), SinkError> {
    let s = sink.sql().clear_dead_letter(lsn);
    sink.in_transaction(|_, db| db.exec(&s))
}

/// [`aqueduct_subscribe::Sink::reset`].
pub(crate) fn reset<S: SqlSink>(sink: &mut S) -> Result<(), SinkError> {
    sink.in_transaction(|sql, db| sql::reset(sql, db))
}

/// [`aqueduct_subscribe::Sink::resume`].
pub(crate) fn resume<S: SqlSink>(sink: &S) -> Result<Resume, SinkError> {
    sink.read(|sql, db| sql.resume(db))
}

/// [`aqueduct_subscribe::Sink::ensure_objects`]: the missing objects'
/// DDL first where that commits apart, then the rest in a transaction.
pub(crate) fn ensure_objects<S: SqlSink>(
    sink: &mut S,
    objects: &BTreeMap<String, ObjectSchema>,
) -> Result<(), SinkError> {
    ddl_first(sink, |sql, db| sql::ensure_ddl(sql, db, objects))?;
    sink.in_transaction(|sql, db| sql::ensure_objects(sql, db, objects))
}

/// [`aqueduct_subscribe::Sink::origin_applied`].
pub(crate) fn origin_applied<S: SqlSink>(
    sink: &S,
    server_id: &str,
    lsn: Lsn,
) -> Result<Option<bool>, SinkError> {
    sink.read(|sql, db| sql.origin_applied(db, server_id, lsn))
        .map(Some)
}

/// [`aqueduct_subscribe::Sink::note_server`].
pub(crate) fn note_server<S: SqlSink>(sink: &mut S, server_id: &str) -> Result<(), SinkError> {
    let s = sink.sql().note_server(server_id);
    sink.in_transaction(|_, db| db.exec(&s))
}

/// The subscription's identity (server, publication, mode).
pub(crate) fn identity<S: SqlSink>(sink: &S) -> Result<Identity, SinkError> {
    sink.read(|sql, db| sql.identity(db))
}

/// Records the subscription's identity.
pub(crate) fn set_identity<S: SqlSink>(sink: &mut S, id: &Identity) -> Result<(), SinkError> {
    let s = sink.sql().set_identity(id);
    sink.in_transaction(|_, db| db.exec(&s))
}

/// [`aqueduct_subscribe::Sink::clear_object`].
pub(crate) fn clear_object<S: SqlSink>(
    sink: &mut S,
    object: &str,
    filter: Option<&str>,
) -> Result<(), SinkError> {
    sink.in_transaction(|sql, db| sql::clear_object(sql, db, object, filter))
}

/// [`aqueduct_subscribe::Sink::origin`].
pub(crate) fn origin<S: SqlSink>(sink: &S) -> Result<aqueduct_subscribe::Origin, SinkError> {
    sink.read(|sql, db| sql.origin(db))
}

/// [`aqueduct_subscribe::Sink::set_origin`].
pub(crate) fn set_origin<S: SqlSink>(
    sink: &mut S,
    o: &aqueduct_subscribe::Origin,
) -> Result<(), SinkError> {
    let s = sink.sql().set_origin(o);
    sink.in_transaction(|_, db| db.exec(&s))
}

/// One object's present rows.
pub(crate) fn rows<S: SqlSink>(sink: &S, object: &str) -> Result<Rows, SinkError> {
    sink.read(|sql, db| sql.rows(db, object))
}

/// The objects the sink holds, with their shapes.
pub(crate) fn objects<S: SqlSink>(sink: &S) -> Result<BTreeMap<String, ObjectSchema>, SinkError> {
    sink.read(|sql, db| sql.shapes(db))
}

/// A batch cut at its schema items, each of which runs its DDL before its
/// own transaction: the parts in order, each with the part of `record` it
/// commits. The agent sends schema items alone (they are barriers), so a
/// batch is nearly always one part.
fn parts<'a>(items: &'a [Item], record: &Record) -> Vec<(&'a [Item], Record)> {
    let mut out: Vec<(&[Item], Record)> = Vec::new();
    let mut start = 0;
    let mut cut = |end: usize, out: &mut Vec<(&'a [Item], Record)>| {
        if end > start {
            let part = &items[start..end];
            let applied = part
                .iter()
                .filter(|i| !matches!(i, Item::Schema(..)))
                .map(Item::lsn)
                .filter(|l| record.applied.contains(l))
                .collect();
            let schema = part.iter().rev().find_map(|i| match i {
                Item::Schema(_, pos) => Some(*pos),
                _ => None,
            });
            out.push((
                part,
                Record {
                    applied,
                    watermark: None,
                    schema,
                },
            ));
        }
        start = end;
    };
    for (i, item) in items.iter().enumerate() {
        if matches!(item, Item::Schema(..)) {
            cut(i, &mut out);
            cut(i + 1, &mut out);
        }
    }
    cut(items.len(), &mut out);
    if out.is_empty() {
        out.push((&items[..0], Record::default()));
    }
    // What no item claims (and the watermark) goes with the last part.
    let claimed: Vec<Lsn> = out.iter().flat_map(|(_, r)| r.applied.clone()).collect();
    let last = &mut out.last_mut().expect("a part").1;
    last.applied.extend(
        record
            .applied
            .iter()
            .filter(|l| !claimed.contains(l))
            .copied(),
    );
    last.watermark = record.watermark;
    if last.schema.is_none() && items.iter().all(|i| !matches!(i, Item::Schema(..))) {
        last.schema = record.schema;
    }
    out
}

/// The [`aqueduct_subscribe::Sink`] implementation of a type implementing
/// [`SqlSink`], and the public methods every SQL sink has.
macro_rules! sql_sink {
    ($sink:ty) => {
        impl aqueduct_subscribe::Sink for $sink {
            fn position_mode(&self) -> aqueduct_subscribe::PositionMode {
                aqueduct_subscribe::PositionMode::InApply
            }

            fn apply(
                &mut self,
                items: &[aqueduct_subscribe::Item],
                record: &aqueduct_subscribe::Record,
            ) -> Result<(), aqueduct_subscribe::SinkError> {
                $crate::sql_sink::apply(self, items, record)
            }

            fn store_position(
                &mut self,
                watermark: aqueduct_publish::Lsn,
                _applied_above: &[aqueduct_publish::Lsn],
                schema: Option<aqueduct_subscribe::SchemaPos>,
            ) -> Result<(), aqueduct_subscribe::SinkError> {
                $crate::sql_sink::store_position(self, watermark, schema)
            }

            fn store_dead_letter(
                &mut self,
                lsn: aqueduct_publish::Lsn,
                error: &aqueduct_subscribe::SinkError,
                attempts: u32,
            ) -> Result<(), aqueduct_subscribe::SinkError> {
                $crate::sql_sink::store_dead_letter(self, lsn, error, attempts)
            }

            fn clear_dead_letter(
                &mut self,
                lsn: aqueduct_publish::Lsn,
            ) -> Result<(), aqueduct_subscribe::SinkError> {
                $crate::sql_sink::clear_dead_letter(self, lsn)
            }

            fn reset(&mut self) -> Result<(), aqueduct_subscribe::SinkError> {
                $crate::sql_sink::reset(self)
            }

            fn resume(&self) -> Result<aqueduct_subscribe::Resume, aqueduct_subscribe::SinkError> {
                $crate::sql_sink::resume(self)
            }

            fn origin(&self) -> Result<aqueduct_subscribe::Origin, aqueduct_subscribe::SinkError> {
                $crate::sql_sink::origin(self)
            }

            fn clear_object(
                &mut self,
                object: &str,
                filter: Option<&str>,
            ) -> Result<(), aqueduct_subscribe::SinkError> {
                $crate::sql_sink::clear_object(self, object, filter)
            }

            fn set_origin(
                &mut self,
                o: &aqueduct_subscribe::Origin,
            ) -> Result<(), aqueduct_subscribe::SinkError> {
                $crate::sql_sink::set_origin(self, o)
            }

            fn ensure_objects(
                &mut self,
                objects: &std::collections::BTreeMap<String, aqueduct_publish::ObjectSchema>,
            ) -> Result<(), aqueduct_subscribe::SinkError> {
                $crate::sql_sink::ensure_objects(self, objects)
            }

            fn origin_applied(
                &self,
                server_id: &str,
                lsn: aqueduct_publish::Lsn,
            ) -> Result<Option<bool>, aqueduct_subscribe::SinkError> {
                $crate::sql_sink::origin_applied(self, server_id, lsn)
            }

            fn note_server(
                &mut self,
                server_id: &str,
            ) -> Result<(), aqueduct_subscribe::SinkError> {
                $crate::sql_sink::note_server(self, server_id)
            }
        }

        impl $sink {
            /// The subscription's name.
            pub fn name(&self) -> &str {
                &$crate::sql_sink::SqlSink::sql(self).name
            }

            /// The subscription's identity (server, publication, mode).
            pub fn identity(&self) -> Result<$crate::Identity, aqueduct_subscribe::SinkError> {
                $crate::sql_sink::identity(self)
            }

            /// Records the subscription's identity.
            pub fn set_identity(
                &mut self,
                id: &$crate::Identity,
            ) -> Result<(), aqueduct_subscribe::SinkError> {
                $crate::sql_sink::set_identity(self, id)
            }

            /// One object's present rows, values as the wire writes them.
            pub fn rows(
                &self,
                object: &str,
            ) -> Result<$crate::Rows, aqueduct_subscribe::SinkError> {
                $crate::sql_sink::rows(self, object)
            }

            /// The objects the sink holds, with their shapes.
            pub fn objects(
                &self,
            ) -> Result<
                std::collections::BTreeMap<String, aqueduct_publish::ObjectSchema>,
                aqueduct_subscribe::SinkError,
            > {
                $crate::sql_sink::objects(self)
            }
        }
    };
}
pub(crate) use sql_sink;

#[cfg(test)]
mod tests {
    use super::*;
    use aqueduct_publish::{SchemaChange, SchemaMessage};
    use std::sync::Arc;

    fn schema_item(lsn: Lsn) -> Item {
        Item::Schema(
            Arc::new(SchemaMessage {
                lsn,
                epoch: 0,
                object: "posts".into(),
                change: SchemaChange::DropAttribute { name: "x".into() },
            }),
            SchemaPos { lsn, seq: 0 },
        )
    }

    #[test]
    fn batches_cut_at_schema_items() {
        let items = [Item::Skip { lsn: 3 }, schema_item(4), Item::Skip { lsn: 5 }];
        let record = Record {
            applied: vec![3, 5, 9],
            watermark: Some(3),
            schema: Some(SchemaPos { lsn: 4, seq: 0 }),
        };
        let p = parts(&items, &record);
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].1.applied, vec![3]);
        assert_eq!(p[0].1.watermark, None);
        assert_eq!(p[1].1.schema, Some(SchemaPos { lsn: 4, seq: 0 }));
        assert!(p[1].1.applied.is_empty());
        assert_eq!(p[2].1.applied, vec![5, 9]);
        assert_eq!(p[2].1.watermark, Some(3));
        assert_eq!(p[2].1.schema, None);
        // A record without items is one part.
        let only = Record {
            applied: vec![],
            watermark: Some(7),
            schema: None,
        };
        let p = parts(&[], &only);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].1, only);
    }
}
