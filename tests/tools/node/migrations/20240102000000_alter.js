// knex migration 2: alterTable adds, renames and drops columns, and adds a table.
exports.up = async (knex) => {
  await knex.schema.createTable('kx_review', (t) => {
    t.increments('id');
    t.integer('book_id').notNullable().references('kx_book.id').onDelete('CASCADE');
    t.integer('rating').notNullable();
    t.text('body');
  });
  await knex.schema.alterTable('kx_book', (t) => {
    t.string('isbn', 20);
    t.integer('pages').notNullable().defaultTo(0);
    t.renameColumn('in_print', 'available');
  });
  await knex.schema.alterTable('kx_author', (t) => {
    t.dropColumn('email');
  });
};

exports.down = async (knex) => {
  await knex.schema.alterTable('kx_author', (t) => {
    t.string('email');
  });
  await knex.schema.alterTable('kx_book', (t) => {
    t.renameColumn('available', 'in_print');
    t.dropColumn('pages');
    t.dropColumn('isbn');
  });
  await knex.schema.dropTable('kx_review');
};
