//! The Redis sink: each row a hash, guarded by its version, and the
//! position beside the rows, each batch one Lua script (`docs/publications.md`
//! §5.4, §6), over the synchronous `redis` client without TLS.
//!
//! Keys, for the subscription `{name}` (one Redis server, not a cluster:
//! the script touches keys it computes):
//!
//! - `aq:{name}:{object}:{key}`: a row, a hash with `_v` (the row version)
//!   and one field per non-NULL attribute holding the value's JSON text as
//!   the wire writes it; `{key}` is the key's JSON array text (`[1]`);
//! - `aq:{name}:rows:{object}`: a set of the object's present keys;
//! - `aq:{name}:tomb:{object}`: the object's tombstones, a sorted set of
//!   keys scored by the delete's version;
//! - `aq:{name}:objects`: a hash of each object's published shape (JSON);
//! - `aq:{name}:applied`: a sorted set of the transactions applied at or
//!   above the watermark;
//! - `aq:{name}:sub`: a hash with `watermark`, `schema_lsn`, `schema_seq`;
//! - `aq:{name}:origin`: where the copy came from (server id, bootstrap
//!   LSN, in-sync LSN), as JSON;
//! - `aq:{name}:dead`: a hash of dead letters by LSN (`{"error",
//!   "attempts"}`).
//!
//! Every [`Sink::apply`] is one script, atomic in Redis: it first refuses a
//! batch holding a transaction already in `applied` (nothing is written),
//! then writes each row whose stored version and tombstone are older,
//! adds the applied LSNs, and moves the watermark, deleting `applied`
//! entries and tombstones below it. So the position is stored with the rows
//! ([`PositionMode::InApply`]), exactly once as far as Redis's own
//! persistence is durable: with AOF and `appendfsync always`; with anything
//! less a crash of the server can lose the last writes (rows and position
//! together, so the agent sends them again).
//!
//! Redis has no schema: a row's hash holds what its last write carried.
//! Schema changes only update the stored shape at once: an added attribute
//! appears in each row's hash at the row's next write, and `existing` is
//! not back-filled into rows written before the change; a renamed or
//! dropped attribute stays under its old name in each row until the row's
//! next write, which rewrites the hash whole. Values are not checked
//! against the attributes' types, and attributes outside the shape are
//! stored as they come.
//!
//! Versions and LSNs are compared as Lua numbers, exact up to 2^53; larger
//! ones are refused. Connection errors, timeouts, a server loading its
//! data, out of memory or busy with a script are transient; everything
//! else is permanent. A connection that failed is opened again on the next
//! call.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use aqueduct_publish::{AttributeType, ChangeOp, Lsn, ObjectSchema, SchemaChange};
use aqueduct_subscribe::{
    key_text, Item, PositionMode, Record, Resume, SchemaPos, Sink, SinkError,
};
use redis::{Client, Connection};
use serde_json::{json, Map, Value};

use crate::classified;
use crate::sql::Rows;

/// How long connecting and each command may take before the error
/// (transient) is reported.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The largest version the script compares exactly.
const MAX_EXACT: Lsn = 1 << 53;

/// The batch script. `ARGV[1]` is the batch as JSON: `p` the key prefix,
/// `ops` the row and shape writes, `applied`, `watermark` and `schema` the
/// record. LSNs travel as strings (Lua's JSON numbers lose digits).
const APPLY: &str = r#"
local d = cjson.decode(ARGV[1])
local p = d.p
for _, l in ipairs(d.applied) do
  if redis.call('ZSCORE', p .. 'applied', l) then
    return redis.error_reply('APPLIED transaction ' .. l .. ' is applied already')
  end
end
local sub = p .. 'sub'
if d.watermark then
  local cur = tonumber(redis.call('HGET', sub, 'watermark') or '0')
  if tonumber(d.watermark) < cur then
    return redis.error_reply('BACKWARDS the stored watermark moves back from ' .. cur)
  end
end
for _, op in ipairs(d.ops) do
  if op.op == 'put' or op.op == 'del' then
    local row = p .. op.o .. ':' .. op.k
    local tomb = p .. 'tomb:' .. op.o
    local v = tonumber(op.v)
    local cur = redis.call('HGET', row, '_v')
    local dead = redis.call('ZSCORE', tomb, op.k)
    if (cur and tonumber(cur) >= v) or (dead and tonumber(dead) >= v) then
      -- The sink holds a newer write of the row: this one is skipped.
    elseif op.op == 'put' then
      redis.call('DEL', row)
      local args = {'_v', op.v}
      for _, fv in ipairs(op.f) do
        args[#args + 1] = fv[1]
        args[#args + 1] = fv[2]
      end
      redis.call('HSET', row, unpack(args))
      redis.call('SADD', p .. 'rows:' .. op.o, op.k)
      if dead then redis.call('ZREM', tomb, op.k) end
    else
      redis.call('DEL', row)
      redis.call('SREM', p .. 'rows:' .. op.o, op.k)
      redis.call('ZADD', tomb, op.v, op.k)
    end
  elseif op.op == 'shape' then
    redis.call('HSET', p .. 'objects', op.o, op.s)
  elseif op.op == 'drop' then
    for _, k in ipairs(redis.call('SMEMBERS', p .. 'rows:' .. op.o)) do
      redis.call('DEL', p .. op.o .. ':' .. k)
    end
    redis.call('DEL', p .. 'rows:' .. op.o, p .. 'tomb:' .. op.o)
    redis.call('HDEL', p .. 'objects', op.o)
  end
end
for _, l in ipairs(d.applied) do
  redis.call('ZADD', p .. 'applied', l, l)
end
if d.schema then
  local l, q = tonumber(d.schema[1]), tonumber(d.schema[2])
  local cl = tonumber(redis.call('HGET', sub, 'schema_lsn') or '-1')
  local cq = tonumber(redis.call('HGET', sub, 'schema_seq') or '-1')
  if cl < l or (cl == l and cq < q) then
    redis.call('HSET', sub, 'schema_lsn', d.schema[1], 'schema_seq', d.schema[2])
  end
end
if d.watermark then
  local w = d.watermark
  redis.call('HSET', sub, 'watermark', w)
  redis.call('ZREMRANGEBYSCORE', p .. 'applied', '-inf', '(' .. w)
  for _, o in ipairs(redis.call('HKEYS', p .. 'objects')) do
    redis.call('ZREMRANGEBYSCORE', p .. 'tomb:' .. o, '-inf', '(' .. w)
  end
end
return 1
"#;

/// A Redis database holding a subscription's copy and its position.
pub struct RedisSink {
    client: Client,
    conn: RefCell<Option<Connection>>,
    name: String,
}

/// Classifies a Redis error (§5.5): I/O, refused or dropped connections,
/// timeouts, and the server loading, out of memory, busy with a script,
/// read-only or its cluster down are transient; everything else (the
/// script's refusals, bad commands) is permanent.
pub fn classify(e: redis::RedisError) -> SinkError {
    use redis::{ErrorKind, ServerErrorKind};
    let transient = e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        )
        || matches!(e.code(), Some("OOM" | "BUSY" | "LOADING"));
    classified(transient, format!("redis: {e}"))
}

/// An LSN as the script takes it.
fn lsn_text(l: Lsn) -> Result<String, SinkError> {
    if l > MAX_EXACT {
        return Err(SinkError::permanent(format!(
            "LSN {l} is above 2^53, which the Redis sink compares exactly"
        )));
    }
    Ok(l.to_string())
}

impl RedisSink {
    /// Connects to `url` (`redis://[user:password@]host:port[/db]`) for the
    /// subscription `name`.
    pub fn connect(url: &str, name: &str) -> Result<RedisSink, SinkError> {
        let client = Client::open(url).map_err(classify)?;
        let sink = RedisSink {
            client,
            conn: RefCell::new(None),
            name: name.to_string(),
        };
        sink.with_conn(|c| redis::cmd("PING").query::<String>(c))?;
        Ok(sink)
    }

    /// The subscription's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The prefix of every key of the subscription.
    fn prefix(&self) -> String {
        format!("aq:{}:", self.name)
    }

    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T, SinkError> {
        let mut slot = self.conn.borrow_mut();
        if slot.is_none() {
            let conn = self
                .client
                .get_connection_with_timeout(TIMEOUT)
                .map_err(classify)?;
            conn.set_read_timeout(Some(TIMEOUT)).map_err(classify)?;
            conn.set_write_timeout(Some(TIMEOUT)).map_err(classify)?;
            *slot = Some(conn);
        }
        f(slot.as_mut().expect("connected")).map_err(|e| {
            if e.is_unrecoverable_error() || e.is_io_error() || e.is_timeout() {
                *slot = None;
            }
            classify(e)
        })
    }

    /// The objects the sink holds, with their shapes.
    pub fn objects(&self) -> Result<BTreeMap<String, ObjectSchema>, SinkError> {
        let key = format!("{}objects", self.prefix());
        let raw: BTreeMap<String, String> =
            self.with_conn(|c| redis::cmd("HGETALL").arg(&key).query(c))?;
        raw.into_iter()
            .map(|(o, s)| {
                let shape = serde_json::from_str(&s)
                    .map_err(|e| SinkError::permanent(format!("stored shape of {o}: {e}")))?;
                Ok((o, shape))
            })
            .collect()
    }

    /// One object's present rows as stored: each hash's fields parsed from
    /// their JSON text, its `_v` as the version.
    pub fn rows(&self, object: &str) -> Result<Rows, SinkError> {
        let p = self.prefix();
        let keys: Vec<String> = self.with_conn(|c| {
            redis::cmd("SMEMBERS")
                .arg(format!("{p}rows:{object}"))
                .query(c)
        })?;
        if keys.is_empty() {
            return Ok(Rows::new());
        }
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("HGETALL").arg(format!("{p}{object}:{k}"));
        }
        let hashes: Vec<BTreeMap<String, String>> = self.with_conn(|c| pipe.query(c))?;
        let mut out = Rows::new();
        for (k, fields) in keys.into_iter().zip(hashes) {
            let mut version = 0;
            let mut attrs = Map::new();
            for (f, v) in fields {
                if f == "_v" {
                    version = v
                        .parse()
                        .map_err(|_| SinkError::permanent(format!("{object} {k}: _v {v:?}")))?;
                } else {
                    let value = serde_json::from_str(&v).map_err(|e| {
                        SinkError::permanent(format!("{object} {k}: field {f}: {e}"))
                    })?;
                    attrs.insert(f, value);
                }
            }
            out.insert(k, (version, attrs));
        }
        Ok(out)
    }

    /// Runs the batch script on `ops` and `record`.
    fn run(&self, ops: Vec<Value>, record: &Record) -> Result<(), SinkError> {
        let applied = record
            .applied
            .iter()
            .map(|&l| lsn_text(l))
            .collect::<Result<Vec<_>, _>>()?;
        // Absent rather than null: the script's JSON null is true in Lua.
        let mut batch = json!({"p": self.prefix(), "ops": ops, "applied": applied});
        if let Some(w) = record.watermark {
            batch["watermark"] = json!(lsn_text(w)?);
        }
        if let Some(pos) = record.schema {
            batch["schema"] = json!([lsn_text(pos.lsn)?, pos.seq.to_string()]);
        }
        let batch = batch.to_string();
        self.with_conn(|c| {
            redis::cmd("EVAL")
                .arg(APPLY)
                .arg(0)
                .arg(&batch)
                .query::<i64>(c)
        })
        .map(drop)
    }
}

/// The script's operations for a batch's items; `shapes` follows the
/// schema changes among them.
fn ops(
    items: &[Item],
    shapes: &mut BTreeMap<String, ObjectSchema>,
) -> Result<Vec<Value>, SinkError> {
    let mut out = Vec::new();
    let shape_op = |object: &str, shape: &ObjectSchema| json!({"op": "shape", "o": object, "s": serde_json::to_string(shape).expect("shapes serialize")});
    for item in items {
        match item {
            Item::Txn(t) => {
                for c in &t.changes {
                    let shape = shapes.get(&c.object).ok_or_else(|| {
                        SinkError::permanent(format!(
                            "a change of {}, an object the sink lacks",
                            c.object
                        ))
                    })?;
                    if c.key.len() != shape.key.len() {
                        return Err(SinkError::permanent(format!(
                            "{}: a key of {} values for {} key columns",
                            c.object,
                            c.key.len(),
                            shape.key.len()
                        )));
                    }
                    let k = key_text(&c.key);
                    let v = lsn_text(c.version)?;
                    match c.op {
                        ChangeOp::Insert | ChangeOp::Update => {
                            let mut attrs = c.attrs.clone().unwrap_or_default();
                            for (name, value) in shape.key.iter().zip(&c.key) {
                                attrs.insert(name.clone(), value.clone());
                            }
                            let fields: Vec<Value> = attrs
                                .iter()
                                .filter(|(f, value)| !value.is_null() && f.as_str() != "_v")
                                .map(|(f, value)| json!([f, value.to_string()]))
                                .collect();
                            out.push(
                                json!({"op": "put", "o": c.object, "k": k, "v": v, "f": fields}),
                            );
                        }
                        ChangeOp::Delete => {
                            out.push(json!({"op": "del", "o": c.object, "k": k, "v": v}));
                        }
                    }
                }
            }
            Item::Schema(m, _) => {
                let object = &m.object;
                let lacks = || {
                    SinkError::permanent(format!(
                        "a schema change of {object}, which the sink lacks"
                    ))
                };
                match &m.change {
                    SchemaChange::AddAttribute { name, ty, .. } => {
                        let shape = shapes.get_mut(object).ok_or_else(lacks)?;
                        if !shape.attributes.iter().any(|a| &a.name == name) {
                            shape.attributes.push(AttributeType {
                                name: name.clone(),
                                ty: ty.clone(),
                            });
                        }
                        out.push(shape_op(object, shape));
                    }
                    SchemaChange::DropAttribute { name } => {
                        let shape = shapes.get_mut(object).ok_or_else(lacks)?;
                        if shape.key.contains(name) {
                            return Err(SinkError::permanent(format!(
                                "{object}: dropping key column {name}"
                            )));
                        }
                        shape.attributes.retain(|a| &a.name != name);
                        out.push(shape_op(object, shape));
                    }
                    SchemaChange::RenameAttribute { from, to } => {
                        let shape = shapes.get_mut(object).ok_or_else(lacks)?;
                        for a in &mut shape.attributes {
                            if &a.name == from {
                                a.name = to.clone();
                            }
                        }
                        for k in &mut shape.key {
                            if k == from {
                                *k = to.clone();
                            }
                        }
                        out.push(shape_op(object, shape));
                    }
                    SchemaChange::AddObject { object, schema } => {
                        if !shapes.contains_key(object) {
                            check_shape(object, schema)?;
                            shapes.insert(object.clone(), schema.clone());
                            out.push(shape_op(object, schema));
                        }
                    }
                    SchemaChange::DropObject { object } => {
                        shapes.remove(object);
                        out.push(json!({"op": "drop", "o": object}));
                    }
                }
            }
            Item::Skip { .. } => {}
        }
    }
    Ok(out)
}

/// Refuses a shape without a key or with a key column it lacks.
fn check_shape(object: &str, shape: &ObjectSchema) -> Result<(), SinkError> {
    if shape.key.is_empty() {
        return Err(SinkError::permanent(format!("{object} has no key")));
    }
    for k in &shape.key {
        if !shape.attributes.iter().any(|a| &a.name == k) {
            return Err(SinkError::permanent(format!(
                "{object}: key column {k} is not an attribute"
            )));
        }
    }
    Ok(())
}

impl Sink for RedisSink {
    fn position_mode(&self) -> PositionMode {
        PositionMode::InApply
    }

    fn apply(&mut self, items: &[Item], record: &Record) -> Result<(), SinkError> {
        let mut shapes = self.objects()?;
        let ops = ops(items, &mut shapes)?;
        self.run(ops, record)
    }

    fn store_position(
        &mut self,
        watermark: Lsn,
        _applied_above: &[Lsn],
        schema: Option<SchemaPos>,
    ) -> Result<(), SinkError> {
        self.run(
            Vec::new(),
            &Record {
                applied: Vec::new(),
                watermark: Some(watermark),
                schema,
            },
        )
    }

    fn store_dead_letter(
        &mut self,
        lsn: Lsn,
        error: &SinkError,
        attempts: u32,
    ) -> Result<(), SinkError> {
        let key = format!("{}dead", self.prefix());
        let value = json!({"error": error.to_string(), "attempts": attempts}).to_string();
        self.with_conn(|c| {
            redis::cmd("HSET")
                .arg(&key)
                .arg(lsn.to_string())
                .arg(&value)
                .query::<i64>(c)
        })
        .map(drop)
    }

    fn clear_dead_letter(&mut self, lsn: Lsn) -> Result<(), SinkError> {
        let key = format!("{}dead", self.prefix());
        self.with_conn(|c| {
            redis::cmd("HDEL")
                .arg(&key)
                .arg(lsn.to_string())
                .query::<i64>(c)
        })
        .map(drop)
    }

    fn clear_object(&mut self, object: &str, filter: Option<&str>) -> Result<(), SinkError> {
        if filter.is_some() {
            return Err(SinkError::permanent(
                "a Redis sink cannot delete rows by a condition: clear the whole object",
            ));
        }
        let p = self.prefix();
        let keys: Vec<String> = self.with_conn(|c| {
            redis::cmd("SMEMBERS")
                .arg(format!("{p}rows:{object}"))
                .query(c)
        })?;
        let mut pipe = redis::pipe();
        pipe.atomic();
        for k in &keys {
            pipe.cmd("DEL").arg(format!("{p}{object}:{k}")).ignore();
        }
        pipe.cmd("DEL").arg(format!("{p}rows:{object}")).ignore();
        self.with_conn(|c| pipe.query::<()>(c))
    }

    fn reset(&mut self) -> Result<(), SinkError> {
        let p = self.prefix();
        // The position first: a crash part way leaves a subscription that
        // is bootstrapped again, never one that trusts half its rows.
        self.with_conn(|c| {
            redis::cmd("HSET")
                .arg(format!("{p}sub"))
                .arg("watermark")
                .arg("0")
                .query::<i64>(c)
        })?;
        for object in self.objects()?.keys() {
            let keys: Vec<String> = self.with_conn(|c| {
                redis::cmd("SMEMBERS")
                    .arg(format!("{p}rows:{object}"))
                    .query(c)
            })?;
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("DEL").arg(format!("{p}{object}:{k}")).ignore();
            }
            pipe.cmd("DEL").arg(format!("{p}rows:{object}")).ignore();
            pipe.cmd("DEL").arg(format!("{p}tomb:{object}")).ignore();
            self.with_conn(|c| pipe.query::<()>(c))?;
        }
        self.with_conn(|c| {
            redis::pipe()
                .cmd("DEL")
                .arg(format!("{p}applied"))
                .ignore()
                .cmd("HDEL")
                .arg(format!("{p}sub"))
                .arg("schema_lsn")
                .arg("schema_seq")
                .ignore()
                .query::<()>(c)
        })
    }

    fn origin(&self) -> Result<aqueduct_subscribe::Origin, SinkError> {
        let key = format!("{}origin", self.prefix());
        let text: Option<String> = self.with_conn(|c| redis::cmd("GET").arg(&key).query(c))?;
        match text {
            None => Ok(Default::default()),
            Some(t) => serde_json::from_str(&t)
                .map_err(|e| SinkError::permanent(format!("stored origin: {e}"))),
        }
    }

    fn set_origin(&mut self, o: &aqueduct_subscribe::Origin) -> Result<(), SinkError> {
        let key = format!("{}origin", self.prefix());
        let text = serde_json::to_string(o).expect("origins serialize");
        self.with_conn(|c| redis::cmd("SET").arg(&key).arg(text).query::<()>(c))
    }

    fn resume(&self) -> Result<Resume, SinkError> {
        let p = self.prefix();
        let (sub, applied, dead): (
            BTreeMap<String, String>,
            Vec<String>,
            BTreeMap<String, String>,
        ) = self.with_conn(|c| {
            redis::pipe()
                .cmd("HGETALL")
                .arg(format!("{p}sub"))
                .cmd("ZRANGE")
                .arg(format!("{p}applied"))
                .arg(0)
                .arg(-1)
                .cmd("HGETALL")
                .arg(format!("{p}dead"))
                .query(c)
        })?;
        let num = |what: &str, t: &str| {
            t.parse::<Lsn>()
                .map_err(|_| SinkError::permanent(format!("stored {what} {t:?} is not a number")))
        };
        let watermark = sub
            .get("watermark")
            .map_or(Ok(0), |t| num("watermark", t))?;
        let schema = match (sub.get("schema_lsn"), sub.get("schema_seq")) {
            (Some(l), Some(q)) => Some(SchemaPos {
                lsn: num("schema_lsn", l)?,
                seq: u32::try_from(num("schema_seq", q)?)
                    .map_err(|e| SinkError::permanent(e.to_string()))?,
            }),
            _ => None,
        };
        let mut applied_above = applied
            .iter()
            .map(|t| num("applied LSN", t))
            .collect::<Result<Vec<_>, _>>()?;
        applied_above.sort_unstable();
        let mut dead_letters = Vec::new();
        for (l, v) in dead {
            let v: Value = serde_json::from_str(&v)
                .map_err(|e| SinkError::permanent(format!("dead letter {l}: {e}")))?;
            let attempts = v["attempts"].as_u64().unwrap_or(0);
            dead_letters.push((
                num("dead letter LSN", &l)?,
                u32::try_from(attempts).map_err(|e| SinkError::permanent(e.to_string()))?,
            ));
        }
        dead_letters.sort_unstable();
        Ok(Resume {
            watermark,
            applied_above,
            schema,
            dead_letters,
        })
    }

    fn ensure_objects(
        &mut self,
        objects: &BTreeMap<String, ObjectSchema>,
    ) -> Result<(), SinkError> {
        for (object, shape) in objects {
            check_shape(object, shape)?;
        }
        if objects.is_empty() {
            return Ok(());
        }
        let key = format!("{}objects", self.prefix());
        let mut pipe = redis::pipe();
        for (object, shape) in objects {
            let shape = serde_json::to_string(shape).expect("shapes serialize");
            pipe.cmd("HSETNX").arg(&key).arg(object).arg(shape).ignore();
        }
        self.with_conn(|c| pipe.query::<()>(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aqueduct_publish::{Change, SchemaMessage, TxnMessage};
    use std::sync::Arc;

    fn posts() -> BTreeMap<String, ObjectSchema> {
        let shape = ObjectSchema {
            attributes: vec![
                AttributeType {
                    name: "id".into(),
                    ty: "bigint".into(),
                },
                AttributeType {
                    name: "body".into(),
                    ty: "text".into(),
                },
            ],
            key: vec!["id".into()],
        };
        BTreeMap::from([("posts".to_string(), shape)])
    }

    #[test]
    fn operations() {
        let change = Change {
            object: "posts".into(),
            op: ChangeOp::Update,
            key: vec![json!(1)],
            attrs: Some(
                json!({"body": "it's", "n": null})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
            version: 7,
            prev_version: None,
        };
        let txn = Item::Txn(Arc::new(TxnMessage {
            lsn: 7,
            first_lsn: 7,
            txid: "s:7".into(),
            commit_time: "2025-01-01T00:00:00.000000Z".into(),
            epoch: 0,
            frame: 0,
            last: true,
            deps: None,
            bootstrap: false,
            changes: vec![change],
            origin: None,
        }));
        let rename = Item::Schema(
            Arc::new(SchemaMessage {
                lsn: 8,
                epoch: 0,
                object: "posts".into(),
                change: SchemaChange::RenameAttribute {
                    from: "body".into(),
                    to: "text".into(),
                },
            }),
            SchemaPos { lsn: 8, seq: 0 },
        );
        let mut shapes = posts();
        let ops = ops(&[txn, rename], &mut shapes).unwrap();
        assert_eq!(
            ops[0],
            json!({"op": "put", "o": "posts", "k": "[1]", "v": "7",
                "f": [["body", "\"it's\""], ["id", "1"]]})
        );
        assert_eq!(ops[1]["op"], "shape");
        assert_eq!(shapes["posts"].attributes[1].name, "text");
        assert!(ops_err(&mut BTreeMap::new()).contains("lacks"));
        assert!(lsn_text(MAX_EXACT + 1).is_err());
    }

    fn ops_err(shapes: &mut BTreeMap<String, ObjectSchema>) -> String {
        let drop = Item::Schema(
            Arc::new(SchemaMessage {
                lsn: 1,
                epoch: 0,
                object: "x".into(),
                change: SchemaChange::DropAttribute { name: "a".into() },
            }),
            SchemaPos { lsn: 1, seq: 0 },
        );
        ops(&[drop], shapes).unwrap_err().message
    }
}
