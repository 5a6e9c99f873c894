// knex migration 1: two tables with increments, strings, a foreign key, timestamps.
exports.up = async (knex) => {
  await knex.schema.createTable('kx_author', (t) => {
    t.increments('id');
    t.string('name', 100).notNullable().unique();
    t.string('email');
    t.timestamps(true, true);
  });
  await knex.schema.createTable('kx_book', (t) => {
    t.increments('id');
    t.string('title', 200).notNullable();
    t.integer('author_id').unsigned().notNullable().references('id').inTable('kx_author').onDelete('CASCADE');
    t.decimal('price', 10, 2);
    t.boolean('in_print').notNullable().defaultTo(true);
    t.timestamps(true, true);
    t.index(['title']);
  });
};

exports.down = async (knex) => {
  await knex.schema.dropTable('kx_book');
  await knex.schema.dropTable('kx_author');
};
