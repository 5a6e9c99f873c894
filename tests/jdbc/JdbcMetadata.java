// What pgJDBC's DatabaseMetaData and ResultSetMetaData report for the
// schema of tests/jdbc/schema.sql, printed one value a line, sorted, so
// that the outputs for two servers compare with diff. Run by
// scripts/jdbc-compare against PostgreSQL 15 and against Aqueduct.
//
// Usage: java -cp <pgJDBC jar>:<classes> JdbcMetadata JDBC_URL
//
// Each line is `<what> <row key> <column>=<value>`: <what> (no spaces) is
// the call or query, the row key names the
// row (a table and column, an index and its position...), so a difference
// shows as the one value that differs, not as a whole row. NULL is printed
// as NULL, an empty string as ''.

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

public final class JdbcMetadata {
    /** The tables and views of the schema, each read in turn. */
    static final String[] RELATIONS = {"authors", "books", "editions", "reprints", "author_books"};

    /** Queries whose ResultSetMetaData is printed: a table, a view, a join, computed columns. */
    static final String[][] QUERIES = {
        {"table", "SELECT * FROM books"},
        {"view", "SELECT * FROM author_books"},
        {"join", "SELECT a.id, a.email, a.active, a.joined, a.seen, b.id AS book, b.price, b.tags, e.code, e.released"
                + " FROM authors a JOIN books b ON b.author_id = a.id JOIN editions e ON e.book_id = b.id"},
        {"computed", "SELECT b.price * 2 AS doubled, upper(b.title) AS shout, b.pages + 1 AS more, count(*) AS n,"
                + " b.isbn IS NULL AS no_isbn, CAST(b.price AS numeric(12, 3)) AS wide, 'x'::varchar(5) AS five,"
                + " now() AS at FROM books b GROUP BY b.price, b.title, b.pages, b.isbn"},
    };

    static final List<String> out = new ArrayList<>();

    static String show(Object v) {
        if (v == null) return "NULL";
        String s = v.toString();
        return s.isEmpty() ? "''" : s.replace("\n", "\\n");
    }

    /**
     * Every column of every row of {@code rs}, keyed by the values of the
     * columns {@code key} (1-based positions joined with '.'), under {@code what}.
     */
    static void dump(String what, ResultSet rs, String... key) throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        int rows = 0;
        while (rs.next()) {
            rows++;
            StringBuilder k = new StringBuilder();
            for (String col : key) {
                if (k.length() > 0) k.append('.');
                k.append(show(rs.getObject(col)));
            }
            for (int i = 1; i <= md.getColumnCount(); i++) {
                out.add(what + " " + k + " " + md.getColumnLabel(i) + "=" + show(rs.getObject(i)));
            }
        }
        rs.close();
        out.add(what + " rows=" + rows);
    }

    interface Call {
        ResultSet call() throws SQLException;
    }

    /**
     * {@link #dump} of what {@code call} returns; an error is printed as the
     * section's one line (SQLSTATE and message), and the next call goes on.
     */
    static void dump(String what, Call call, String... key) {
        try {
            dump(what, call.call(), key);
        } catch (SQLException e) {
            out.add(what + " ERROR " + e.getSQLState() + " " + show(e.getMessage()));
        }
    }

    static void resultMetadata(Connection c, String name, String sql) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) {
            ResultSetMetaData md = rs.getMetaData();
            out.add("ResultSetMetaData(" + name + ") columns=" + md.getColumnCount());
            for (int i = 1; i <= md.getColumnCount(); i++) {
                String p = "ResultSetMetaData(" + name + ") " + i + " ";
                out.add(p + "getColumnName=" + show(md.getColumnName(i)));
                out.add(p + "getColumnLabel=" + show(md.getColumnLabel(i)));
                out.add(p + "getColumnTypeName=" + show(md.getColumnTypeName(i)));
                out.add(p + "getColumnType=" + md.getColumnType(i));
                out.add(p + "getColumnClassName=" + show(md.getColumnClassName(i)));
                out.add(p + "isNullable=" + md.isNullable(i));
                out.add(p + "getTableName=" + show(md.getTableName(i)));
                out.add(p + "getSchemaName=" + show(md.getSchemaName(i)));
                out.add(p + "getPrecision=" + md.getPrecision(i));
                out.add(p + "getScale=" + md.getScale(i));
                out.add(p + "isAutoIncrement=" + md.isAutoIncrement(i));
                out.add(p + "getColumnDisplaySize=" + md.getColumnDisplaySize(i));
                out.add(p + "isSigned=" + md.isSigned(i));
                out.add(p + "isCaseSensitive=" + md.isCaseSensitive(i));
                out.add(p + "isCurrency=" + md.isCurrency(i));
            }
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: JdbcMetadata JDBC_URL");
            System.exit(2);
        }
        try (Connection c = DriverManager.getConnection(args[0])) {
            DatabaseMetaData md = c.getMetaData();
            dump("getCatalogs", md::getCatalogs, "TABLE_CAT");
            dump("getSchemas", md::getSchemas, "TABLE_SCHEM");
            dump("getTableTypes", md::getTableTypes, "TABLE_TYPE");
            dump("getTables", () -> md.getTables(null, null, "%", new String[] {"TABLE", "VIEW"}),
                    "TABLE_SCHEM", "TABLE_NAME");
            dump("getColumns", () -> md.getColumns(null, "public", "%", "%"), "TABLE_NAME", "COLUMN_NAME");
            for (String t : RELATIONS) {
                dump("getPrimaryKeys(" + t + ")", () -> md.getPrimaryKeys(null, "public", t), "KEY_SEQ");
                dump("getImportedKeys(" + t + ")", () -> md.getImportedKeys(null, "public", t),
                        "FK_NAME", "KEY_SEQ");
                dump("getExportedKeys(" + t + ")", () -> md.getExportedKeys(null, "public", t),
                        "FKTABLE_NAME", "FK_NAME", "KEY_SEQ");
                dump("getIndexInfo(" + t + ")", () -> md.getIndexInfo(null, "public", t, false, false),
                        "INDEX_NAME", "ORDINAL_POSITION");
                dump("getIndexInfo(" + t + ",unique)", () -> md.getIndexInfo(null, "public", t, true, false),
                        "INDEX_NAME", "ORDINAL_POSITION");
            }
            dump("getTypeInfo", md::getTypeInfo, "TYPE_NAME");
            for (String[] q : QUERIES) {
                try {
                    resultMetadata(c, q[0], q[1]);
                } catch (SQLException e) {
                    out.add("ResultSetMetaData(" + q[0] + ") ERROR " + e.getSQLState() + " " + show(e.getMessage()));
                }
            }
        }
        Collections.sort(out);
        for (String line : out) {
            System.out.println(line);
        }
    }
}
