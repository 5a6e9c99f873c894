// knex (with the pg driver) against the server in the PG* variables
// (scripts/tool-tests runs it as `tool knex`): migrations up and down, then
// queries, each compared with the expected answer. Every statement knex sends
// is logged (its query event) to $TOOL_WORK/knex-sql.log; a failed step shows
// the last of them.
'use strict';
const assert = require('assert');
const fs = require('fs');
const path = require('path');
const knexLib = require('knex');

const work = process.env.TOOL_WORK || '/tmp';
const sqlLog = path.join(work, 'knex-sql.log');
fs.writeFileSync(sqlLog, '');
const connection = {
  host: process.env.PGHOST || '127.0.0.1',
  port: Number(process.env.PGPORT || 5432),
  user: process.env.PGUSER || 'postgres',
  database: process.env.PGDATABASE || 'aqueduct',
};
if (process.env.PGPASSWORD) connection.password = process.env.PGPASSWORD;
const knex = knexLib({
  client: 'pg',
  connection,
  pool: { min: 0, max: 4 },
  migrations: { directory: path.join(__dirname, 'migrations'), tableName: 'knex_migrations' },
  acquireConnectionTimeout: 20000,
});
let logged = [];
knex.on('query', (q) => {
  const line = `${q.sql}; bindings=${JSON.stringify(q.bindings || [])}`;
  logged.push(line);
  fs.appendFileSync(sqlLog, line + '\n');
});

const failures = [];
async function step(name, fn) {
  const mark = logged.length;
  try {
    await fn();
    console.log(`step ${name}: ok`);
  } catch (e) {
    failures.push(name);
    const code = e.code ? ` (SQLSTATE ${e.code})` : '';
    console.log(`step ${name}: FAILED: ${e.message.split('\n')[0]}${code}`);
    if (!e.code && e.stack) console.log(e.stack.split('\n').slice(1, 4).map((l) => '    ' + l).join('\n'));
    const tail = logged.slice(Math.max(mark, logged.length - 6));
    if (tail.length) {
      console.log('    last statements the tool sent:');
      for (const l of tail) console.log('      ' + (l.length > 600 ? l.slice(0, 600) + ' ...[clipped]' : l));
    }
  }
}

async function columns(table) {
  const info = await knex(table).columnInfo();
  return Object.keys(info).sort();
}
// Column names from a query's row description (no catalog lookup).
async function resultColumns(table) {
  const r = await knex.raw(`SELECT * FROM ${table} LIMIT 0`);
  return r.fields.map((f) => f.name).sort();
}

async function main() {
  await step('clean', async () => {
    for (const t of ['kx_review', 'kx_book', 'kx_author', 'knex_migrations', 'knex_migrations_lock']) {
      await knex.schema.dropTableIfExists(t);
    }
  });
  await step('migrate-latest', async () => {
    const [batch, done] = await knex.migrate.latest();
    assert.deepStrictEqual([batch, done.map((f) => path.basename(f))],
      [1, ['20240101000000_initial.js', '20240102000000_alter.js']]);
  });
  await step('schema-after-latest', async () => {
    assert.deepStrictEqual(await resultColumns('kx_book'),
      ['author_id', 'available', 'created_at', 'id', 'isbn', 'pages', 'price', 'title', 'updated_at']);
    assert.deepStrictEqual(await resultColumns('kx_author'), ['created_at', 'id', 'name', 'updated_at']);
    assert.deepStrictEqual(await resultColumns('kx_review'), ['body', 'book_id', 'id', 'rating']);
  });
  await step('columnInfo', async () => {
    const info = await knex('kx_book').columnInfo();
    assert.deepStrictEqual(Object.keys(info).sort(),
      ['author_id', 'available', 'created_at', 'id', 'isbn', 'pages', 'price', 'title', 'updated_at']);
    assert.deepStrictEqual(info.title, { type: 'character varying', maxLength: 200, nullable: false, defaultValue: null });
    assert.strictEqual(info.pages.type, 'integer');
    assert.strictEqual(info.pages.defaultValue, '0');
    assert.strictEqual(info.available.type, 'boolean');
  });
  await step('migrate-down', async () => {
    await knex.migrate.down();
    assert.deepStrictEqual(await resultColumns('kx_book'),
      ['author_id', 'created_at', 'id', 'in_print', 'price', 'title', 'updated_at']);
    assert.deepStrictEqual(await resultColumns('kx_author'), ['created_at', 'email', 'id', 'name', 'updated_at']);
    assert.strictEqual(await knex.schema.hasTable('kx_review'), false);
    const [done, pending] = await knex.migrate.list();
    assert.deepStrictEqual([done.map((f) => f.name), pending.map((f) => f.file)],
      [['20240101000000_initial.js'], ['20240102000000_alter.js']]);
  });
  await step('rollback-all', async () => {
    await knex.migrate.rollback(undefined, true);
    assert.strictEqual(await knex.schema.hasTable('kx_book'), false);
    assert.strictEqual(await knex.schema.hasTable('kx_author'), false);
  });
  await step('migrate-latest-again', async () => {
    const [, done] = await knex.migrate.latest();
    assert.strictEqual(done.length, 2);
  });

  let ids = {};
  await step('insert-returning', async () => {
    const authors = await knex('kx_author').insert([{ name: 'Ann' }, { name: 'Ben' }, { name: 'Cy' }]).returning(['id', 'name', 'created_at']);
    assert.deepStrictEqual(authors.map((a) => a.name), ['Ann', 'Ben', 'Cy']);
    assert.ok(authors.every((a) => a.created_at instanceof Date), 'created_at defaulted to a timestamp');
    ids = Object.fromEntries(authors.map((a) => [a.name, a.id]));
    const books = await knex('kx_book').insert([
      { title: 'First', author_id: ids.Ann, price: '10.50', pages: 100 },
      { title: 'Second', author_id: ids.Ann, price: '7.00', isbn: '978-1' },
      { title: 'Third', author_id: ids.Ben, available: false },
    ]).returning('*');
    assert.deepStrictEqual(books.map((b) => [b.title, b.price, b.available, b.pages]),
      [['First', '10.50', true, 100], ['Second', '7.00', true, 0], ['Third', null, false, 0]]);
    ids.books = Object.fromEntries(books.map((b) => [b.title, b.id]));
    await knex('kx_review').insert([
      { book_id: ids.books.First, rating: 5, body: 'great' },
      { book_id: ids.books.First, rating: 3 },
      { book_id: ids.books.Third, rating: 4 },
    ]);
  });
  await step('select-join-where', async () => {
    const rows = await knex('kx_book as b')
      .join('kx_author as a', 'a.id', 'b.author_id')
      .leftJoin('kx_review as r', 'r.book_id', 'b.id')
      .select('a.name', 'b.title')
      .count({ reviews: 'r.id' })
      .avg({ rating: 'r.rating' })
      .where('b.available', true)
      .groupBy('a.name', 'b.title')
      .orderBy('b.title');
    assert.deepStrictEqual(rows.map((r) => [r.name, r.title, Number(r.reviews), r.rating === null ? null : Number(r.rating)]),
      [['Ann', 'First', 2, 4], ['Ann', 'Second', 0, null]]);
    const cheap = await knex('kx_book').where('price', '<', 8).orWhereNull('price').orderBy('id').pluck('title');
    assert.deepStrictEqual(cheap, ['Second', 'Third']);
    const named = await knex('kx_book').whereIn('author_id', [ids.Ben, ids.Cy]).first('title');
    assert.deepStrictEqual(named, { title: 'Third' });
    const like = await knex('kx_author').whereILike('name', '%n%').orderBy('name').pluck('name');
    assert.deepStrictEqual(like, ['Ann', 'Ben']);
  });
  await step('subquery', async () => {
    const rows = await knex('kx_author').whereIn('id', knex('kx_book').select('author_id').where('pages', '>', 50)).pluck('name');
    assert.deepStrictEqual(rows, ['Ann']);
  });
  await step('update', async () => {
    const n = await knex('kx_book').where({ author_id: ids.Ann }).update({ pages: knex.raw('pages + 10'), updated_at: knex.fn.now() });
    assert.strictEqual(n, 2);
    const rows = await knex('kx_book').where({ id: ids.books.Second }).update({ isbn: '978-2' }, ['id', 'isbn']);
    assert.deepStrictEqual(rows, [{ id: ids.books.Second, isbn: '978-2' }]);
    assert.deepStrictEqual(await knex('kx_book').orderBy('id').pluck('pages'), [110, 10, 0]);
  });
  await step('transaction', async () => {
    await assert.rejects(knex.transaction(async (trx) => {
      await trx('kx_author').insert({ name: 'Dee' });
      await trx('kx_author').insert({ name: 'Ann' }); // unique violation
    }), (e) => e.code === '23505');
    assert.strictEqual(await knex('kx_author').where({ name: 'Dee' }).first(), undefined);
    await knex.transaction(async (trx) => {
      await trx('kx_author').insert({ name: 'Dee' });
    });
    assert.strictEqual((await knex('kx_author').where({ name: 'Dee' }).first()).name, 'Dee');
  });
  await step('delete-cascade', async () => {
    const n = await knex('kx_author').where({ name: 'Ann' }).del();
    assert.strictEqual(n, 1);
    assert.deepStrictEqual(await knex('kx_book').orderBy('id').pluck('title'), ['Third']);
    assert.deepStrictEqual(await knex('kx_review').pluck('rating'), [4]);
    const gone = await knex('kx_author').where('name', 'Dee').del(['id', 'name']);
    assert.deepStrictEqual(gone.map((r) => r.name), ['Dee']);
  });
  await step('fk-violation', async () => {
    await assert.rejects(knex('kx_book').insert({ title: 'Orphan', author_id: 999999 }), (e) => e.code === '23503');
  });
  await step('rollback-all-at-end', async () => {
    await knex.migrate.rollback(undefined, true);
    assert.strictEqual(await knex.schema.hasTable('kx_author'), false);
  });

  await knex.destroy();
  if (failures.length) {
    console.log(`tool knex: FAILED (${failures.length} step(s): ${failures.join(', ')})`);
    process.exit(1);
  }
  console.log('tool knex: ok');
}

main().catch(async (e) => {
  console.log(`tool knex: FAILED: ${e.stack}`);
  try { await knex.destroy(); } catch (_) { /* already closed */ }
  process.exit(1);
});
