// Client-compatibility test: node-postgres (pg) against a running server.
//
// Connects with the libpq environment variables (PGHOST, PGPORT, PGUSER,
// PGPASSWORD, PGDATABASE), works on its own table `client_node`, and exits
// non-zero with a message naming the first mismatch.
// CLIENT_TEST_TARGET=postgres skips the Aqueduct-only checks, to debug this
// program against PostgreSQL. Run by scripts/client-tests.
'use strict'

const assert = require('node:assert/strict')
const { Client } = require('pg')

const TABLE = 'client_node'
const AQUEDUCT = (process.env.CLIENT_TEST_TARGET || 'aqueduct') === 'aqueduct'

function check(what, got, want) {
  try {
    assert.deepStrictEqual(got, want)
  } catch (e) {
    throw new Error(`${what}: got ${show(got)}, want ${show(want)}`)
  }
}

function show(v) {
  if (Buffer.isBuffer(v)) return `Buffer<${v.toString('hex')}>`
  if (v instanceof Date) return `Date(${isNaN(v) ? 'invalid' : v.toISOString()})`
  try {
    return JSON.stringify(v)
  } catch {
    return String(v)
  }
}

async function expectError(what, promise, code) {
  try {
    await promise
  } catch (e) {
    if (e.code !== code) {
      throw new Error(`${what}: got SQLSTATE ${e.code} (${e.message}), want ${code}`)
    }
    return
  }
  throw new Error(`${what}: succeeded, want an error with SQLSTATE ${code}`)
}

// node-postgres parses timestamp and date as local times; the script runs
// with TZ=UTC so that local is UTC, and the expected values say so.
const ROW = {
  id: 1,
  small: -32768,
  i: 2147483647,
  big: '9007199254740993', // int8 comes back as a string: 2^53 + 1 does not fit a double
  r: 1.5,
  d: 3.141592653589793,
  n: '1234567890123456.789012345678', // numeric comes back as a string
  b: true,
  t: 'it\'s "quoted" \\ ünïcödé ✓ 🚀',
  v: 'short',
  by: Buffer.concat([Buffer.from([0, 1, 2, 39, 92, 127, 128, 255]), Buffer.from('é')]),
  ts: new Date('2024-02-29T23:59:58.123Z'),
  tstz: new Date('2024-03-05T10:34:56.789Z'),
  dt: new Date('2024-02-29T00:00:00Z'),
  u: 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  j: { a: 1, b: [true, null, 'x'], nested: { k: 'v' } },
  js: { plain: 'json', n: 2.5 },
}
const COLUMNS = Object.keys(ROW)

// What each column is sent as: node-postgres sends every parameter untyped,
// in text (a Buffer in binary), and leaves the type to the server.
function param(c) {
  switch (c) {
    case 'tstz':
      return '2024-03-05 12:34:56.789+02'
    case 'ts':
      return '2024-02-29 23:59:58.123'
    case 'dt':
      return '2024-02-29'
    case 'big':
      return BigInt(ROW.big)
    default:
      return ROW[c]
  }
}

async function main() {
  if (process.env.TZ !== 'UTC') throw new Error('run with TZ=UTC')
  const client = new Client({ connectionTimeoutMillis: 10000 })
  const status = {}
  client.connection.on('parameterStatus', (m) => {
    status[m.parameterName] = m.parameterValue
  })
  await client.connect()
  try {
    await run(client, status)
  } finally {
    await client.end()
  }
  console.log('client node: ok')
}

async function run(client, status) {
  const q = (text, values) => client.query(text, values)

  await q(`DROP TABLE IF EXISTS ${TABLE}`)
  await q(`CREATE TABLE ${TABLE} (
    id bigint PRIMARY KEY,
    small smallint,
    i integer,
    big bigint,
    r real,
    d double precision,
    n numeric,
    b boolean,
    t text,
    v varchar(20),
    by bytea,
    ts timestamp,
    tstz timestamptz,
    dt date,
    u uuid,
    j jsonb,
    js json,
    note text NOT NULL DEFAULT 'none'
  )`)

  // Insert with a parameter for every type; RETURNING gives the row back.
  const ph = COLUMNS.map((_, k) => `$${k + 1}`).join(', ')
  let res = await q(
    `INSERT INTO ${TABLE} (${COLUMNS.join(', ')}) VALUES (${ph}) RETURNING id, note`,
    COLUMNS.map(param),
  )
  check('INSERT ... RETURNING', res.rows, [{ id: '1', note: 'none' }])
  check('INSERT rowCount', res.rowCount, 1)
  let lsn1
  if (AQUEDUCT) {
    lsn1 = status['aqueduct.last_lsn']
    if (!/^[0-9]+$/.test(lsn1 || '') || BigInt(lsn1) <= 0n) {
      throw new Error(`ParameterStatus aqueduct.last_lsn after a write: got ${show(lsn1)}, want a positive integer`)
    }
    res = await q('SHOW aqueduct.last_lsn')
    check('SHOW aqueduct.last_lsn', Object.values(res.rows[0]), [lsn1])
  }

  // Read back: every value and its JavaScript type survive the round trip.
  res = await q(`SELECT ${COLUMNS.join(', ')} FROM ${TABLE} WHERE id = $1`, [1])
  check('rows read back', res.rows.length, 1)
  const want = { ...ROW, id: '1' }
  for (const c of COLUMNS) check(`column ${c}`, res.rows[0][c], want[c])
  check(
    'column types',
    res.fields.map((f) => f.dataTypeID),
    [20, 21, 23, 20, 700, 701, 1700, 16, 25, 1043, 17, 1114, 1184, 1082, 2950, 3802, 114],
  )

  // NULLs of every type, and a multi-row insert.
  const nulls = COLUMNS.slice(1).map(() => null)
  const ph2 = COLUMNS.map((_, k) => `$${k + 1 + COLUMNS.length}`).join(', ')
  res = await q(`INSERT INTO ${TABLE} (${COLUMNS.join(', ')}) VALUES (${ph}), (${ph2})`, [2, ...nulls, 3, ...nulls])
  check('multi-row INSERT rowCount', res.rowCount, 2)
  res = await q(`SELECT ${COLUMNS.slice(1).join(', ')}, note FROM ${TABLE} WHERE id = $1`, [3])
  check('NULLs read back', Object.values(res.rows[0]), [...nulls, 'none'])

  // Parameters in WHERE of several types.
  res = await q(`SELECT id FROM ${TABLE} WHERE u = $1 AND tstz = $2 AND b = $3 AND by = $4 AND n = $5`, [
    ROW.u,
    ROW.tstz,
    true,
    ROW.by,
    ROW.n,
  ])
  check('SELECT with parameters in WHERE', res.rows, [{ id: '1' }])

  // UPDATE ... RETURNING; UPSERT.
  res = await q(`UPDATE ${TABLE} SET t = $1, small = small + 1 WHERE id = $2 RETURNING t, small`, ['updated', 1])
  check('UPDATE ... RETURNING', res.rows, [{ t: 'updated', small: -32767 }])
  check('UPDATE rowCount', res.rowCount, 1)
  res = await q(
    `INSERT INTO ${TABLE} (id, t) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET t = excluded.t RETURNING id, t`,
    [2, 'upserted'],
  )
  check('INSERT ... ON CONFLICT DO UPDATE', res.rows, [{ id: '2', t: 'upserted' }])
  res = await q(`INSERT INTO ${TABLE} (id, t) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, [2, 'ignored'])
  check('ON CONFLICT DO NOTHING rowCount', res.rowCount, 0)

  // Aggregates.
  res = await q(`SELECT count(*) AS n, max(id) AS hi, min(t) AS lo FROM ${TABLE}`)
  check('aggregates', res.rows, [{ n: '3', hi: '3', lo: 'updated' }])

  // Transactions: a rolled-back block leaves nothing; a committed one stays.
  await q('BEGIN')
  await q(`INSERT INTO ${TABLE} (id, t) VALUES ($1, $2)`, [10, 'rolled back'])
  res = await q(`SELECT count(*) AS n FROM ${TABLE} WHERE id = $1`, [10])
  check('own write inside a transaction', res.rows, [{ n: '1' }])
  await q('ROLLBACK')
  res = await q(`SELECT count(*) AS n FROM ${TABLE} WHERE id = $1`, [10])
  check('row of a rolled-back transaction', res.rows, [{ n: '0' }])
  await q('BEGIN')
  await q(`INSERT INTO ${TABLE} (id, t) VALUES ($1, $2)`, [11, 'committed'])
  await q(`UPDATE ${TABLE} SET note = $1 WHERE id = $2`, ['in txn', 11])
  await q('COMMIT')
  res = await q(`SELECT t, note FROM ${TABLE} WHERE id = $1`, [11])
  check('row of a committed transaction', res.rows, [{ t: 'committed', note: 'in txn' }])
  if (AQUEDUCT) {
    const lsn2 = status['aqueduct.last_lsn']
    if (!(BigInt(lsn2) > BigInt(lsn1))) {
      throw new Error(`aqueduct.last_lsn did not advance after a commit: ${lsn1} then ${lsn2}`)
    }
  }

  // Errors carry their SQLSTATE; the connection stays usable.
  await expectError('SELECT from a missing table', q('SELECT * FROM client_node_no_such_table'), '42P01')
  await expectError('INSERT of a duplicate key', q(`INSERT INTO ${TABLE} (id) VALUES ($1)`, [1]), '23505')
  await q('BEGIN')
  await q(`INSERT INTO ${TABLE} (id, t) VALUES ($1, $2)`, [12, 'doomed'])
  await expectError('SELECT from a missing table in a transaction', q('SELECT * FROM client_node_no_such_table'), '42P01')
  await expectError('statement in a failed transaction', q('SELECT 1'), '25P02')
  await q('ROLLBACK')
  res = await q(`SELECT count(*) AS n FROM ${TABLE} WHERE id = $1`, [12])
  check('row of a transaction that failed', res.rows, [{ n: '0' }])

  // DELETE ... RETURNING, then the table holds what is left.
  res = await q(`DELETE FROM ${TABLE} WHERE id IN ($1, $2) RETURNING id`, [2, 3])
  check('DELETE ... RETURNING', res.rows.map((r) => r.id).sort(), ['2', '3'])
  res = await q(`DELETE FROM ${TABLE} WHERE id = $1`, [999])
  check('DELETE of no row rowCount', res.rowCount, 0)
  res = await q(`SELECT id FROM ${TABLE} ORDER BY id DESC LIMIT 5`)
  check('rows left', res.rows, [{ id: '11' }, { id: '1' }])

  // A named prepared statement, reused.
  for (let k = 1; k <= 3; k++) {
    res = await client.query({ name: 'by_id', text: `SELECT t FROM ${TABLE} WHERE id = $1`, values: [11] })
    check(`prepared statement, run ${k}`, res.rows, [{ t: 'committed' }])
  }

  await q(`DROP TABLE ${TABLE}`)
}

main().catch((e) => {
  console.error(`client node: FAILED: ${e.code ? `SQLSTATE ${e.code}: ` : ''}${e.message}`)
  process.exit(1)
})
