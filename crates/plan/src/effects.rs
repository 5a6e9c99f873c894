//! Where volatile functions act while a statement runs: the sequences,
//! through the statement's transaction and its session.

use std::cell::RefCell;

use aqueduct_expr::{Effects, SqlError, Volatile};
use aqueduct_tables::{Catalog, Database, SchemaChange, SequenceState, SessionSequences, Txn};
use aqueduct_values::Value;

/// What volatile functions act on while a statement runs: the sequences,
/// through the statement's transaction and its session.
pub(crate) struct Fx<'a> {
    pub db: &'a Database,
    pub catalog: &'a Catalog,
    pub txn: RefCell<&'a mut Txn>,
    pub seqs: RefCell<&'a mut SessionSequences>,
}

impl Fx<'_> {
    fn sequence(&self, name: &Value) -> Result<&SequenceState, SqlError> {
        let Value::Text(name) = name else {
            return Err(SqlError::new("22004", "a sequence name must not be null"));
        };
        let name = name.strip_prefix("public.").unwrap_or(name);
        self.catalog
            .sequence(name)
            .ok_or_else(|| SqlError::new("42P01", format!("relation \"{name}\" does not exist")))
    }
}

impl Effects for Fx<'_> {
    fn call(&self, f: Volatile, args: &[Value]) -> Result<Value, SqlError> {
        match (f, args) {
            (Volatile::NextVal, [name]) => {
                let seq = self.sequence(name)?;
                let v = self
                    .db
                    .sequences
                    .next(seq, &mut self.txn.borrow_mut())
                    .map_err(|e| SqlError::new("2200H", e.to_string()))?;
                self.seqs.borrow_mut().returned(seq.def.id, v);
                Ok(Value::Int(v))
            }
            (Volatile::CurrVal, [name]) => {
                let seq = self.sequence(name)?;
                self.seqs
                    .borrow()
                    .current(seq.def.id)
                    .map(Value::Int)
                    .ok_or_else(|| {
                        SqlError::new(
                            "55000",
                            format!(
                                "currval of sequence \"{}\" is not yet defined in this session",
                                seq.def.name
                            ),
                        )
                    })
            }
            (Volatile::LastVal, []) => self.seqs.borrow().last().map(Value::Int).ok_or_else(|| {
                SqlError::new("55000", "lastval is not yet defined in this session")
            }),
            (Volatile::SetVal, [name, value, rest @ ..]) => {
                let seq = self.sequence(name)?;
                let Value::Int(v) = value else {
                    return Ok(Value::Null);
                };
                let is_called = !matches!(rest, [Value::Bool(false)]);
                if *v < seq.def.min || *v > seq.def.max {
                    return Err(SqlError::new(
                        "22003",
                        format!(
                            "setval: value {v} is out of bounds for sequence \"{}\" ({}..{})",
                            seq.def.name, seq.def.min, seq.def.max
                        ),
                    ));
                }
                self.txn.borrow_mut().schema(SchemaChange::SetSequence {
                    id: seq.def.id,
                    value: *v,
                    is_called,
                });
                Ok(Value::Int(*v))
            }
            (f, _) => Err(SqlError::new(
                "42883",
                format!(
                    "function {}() with these arguments does not exist",
                    f.name()
                ),
            )),
        }
    }
}
