"""Django 5.2 against the server in the PG* variables (scripts/tool-tests
runs it as `tool django`): migrate, the second migration forward and back
with data in the tables, `manage.py test`, `manage.py inspectdb`.

Every statement Django sends is in $TOOL_WORK/django-sql.log; a failed step
prints the last of them."""
import os
import re
import sys

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from toolcheck import WORK, Checks, clip, conninfo, tail_text  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SQL_LOG = os.path.join(WORK, "django-sql.log")
ENV = dict(os.environ, TOOL_WORK=WORK, DJANGO_SETTINGS_MODULE="toolproj.settings", PYTHONDONTWRITEBYTECODE="1")
checks = Checks("django", SQL_LOG)


def manage(name, *args, **kwargs):
    return checks.run(name, [sys.executable, "manage.py", *args], cwd=HERE, env=ENV, **kwargs)


def columns(table):
    """The column names of a table, from a query's row description."""
    with psycopg.connect(**conninfo(), autocommit=True) as conn:
        cur = conn.execute(f"SELECT * FROM {table} LIMIT 0")
        return [d.name for d in cur.description]


def query(sql, params=None):
    with psycopg.connect(**conninfo(), autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


CUSTOMER_0001 = ["id", "email", "name", "nickname", "profile", "created_at"]
CUSTOMER_0002 = ["id", "email", "name", "profile", "created_at", "loyalty_points", "phone"]
ORDER_0001 = ["id", "status", "created_at", "customer_id", "referrer_id"]
ORDER_0002 = ["id", "state", "created_at", "customer_id", "referrer_id"]
SHOP_TABLES = ["shop_customer", "shop_order", "shop_orderline", "shop_product", "shop_product_tags", "shop_tag"]


def check_0001():
    checks.expect("shop_customer columns", sorted(columns("shop_customer")), sorted(CUSTOMER_0001))
    checks.expect("shop_order columns", sorted(columns("shop_order")), sorted(ORDER_0001))
    for t in SHOP_TABLES:
        columns(t)
    applied = [r[0] for r in query("SELECT name FROM django_migrations WHERE app = 'shop' ORDER BY name")]
    checks.expect("applied shop migrations", applied, ["0001_initial"])


def seed_0001():
    """Rows written at 0001 that the second migration must carry over."""
    with psycopg.connect(**conninfo()) as conn:
        cid = conn.execute(
            "INSERT INTO shop_customer (email, name, nickname, profile, created_at) "
            "VALUES ('seed@example.com', 'Seed', 'seedy', '{\"k\": 1}', now()) RETURNING id").fetchone()[0]
        conn.execute("INSERT INTO shop_order (customer_id, status, created_at) VALUES (%s, 'paid', now())", (cid,))


def check_0002():
    checks.expect("shop_customer columns", sorted(columns("shop_customer")), sorted(CUSTOMER_0002))
    checks.expect("shop_order columns", sorted(columns("shop_order")), sorted(ORDER_0002))
    rows = query("SELECT c.email, c.loyalty_points, c.phone, o.state FROM shop_customer c "
                 "JOIN shop_order o ON o.customer_id = c.id")
    checks.expect("seed row after 0002", rows, [("seed@example.com", 0, None, "paid")])
    # loyalty_points was added NOT NULL with a default that Django then drops.
    with psycopg.connect(**conninfo()) as conn:
        try:
            conn.execute("INSERT INTO shop_customer (email, name, profile, created_at) "
                         "VALUES ('nodefault@example.com', 'N', '{}', now())")
        except psycopg.errors.NotNullViolation:
            pass
        else:
            raise AssertionError("loyalty_points has no NOT NULL (or kept its default): "
                                 "an INSERT without it succeeded; want SQLSTATE 23502")


def check_rolled_back():
    checks.expect("shop_customer columns", sorted(columns("shop_customer")), sorted(CUSTOMER_0001))
    checks.expect("shop_order columns", sorted(columns("shop_order")), sorted(ORDER_0001))
    rows = query("SELECT c.email, c.nickname, o.status FROM shop_customer c JOIN shop_order o ON o.customer_id = c.id")
    # The re-added nickname column is empty (its values were dropped with it).
    checks.expect("seed row after rolling back", rows, [("seed@example.com", None, "paid")])
    applied = [r[0] for r in query("SELECT name FROM django_migrations WHERE app = 'shop' ORDER BY name")]
    checks.expect("applied shop migrations", applied, ["0001_initial"])


def clear_seed():
    with psycopg.connect(**conninfo()) as conn:
        conn.execute("DELETE FROM shop_order")
        conn.execute("DELETE FROM shop_customer")


def check_test_result(out, err):
    # unittest's summary goes to stderr; the run fails on a non-zero exit.
    text = out + err
    if not re.search(r"^Ran 10 tests in ", text, re.M) or not re.search(r"^OK$", text, re.M):
        raise AssertionError("want 'Ran 10 tests' and 'OK' from the test runner")


def summarize_tests(out, err):
    """Each failing test: its name, its exception, and the last statements it
    sent (Django's --debug-sql prints a failing test's statements)."""
    text = out + "\n" + err
    blocks = re.split(r"^=+\n", text, flags=re.M)
    lines = []
    for b in blocks:
        m = re.match(r"(ERROR|FAIL): (\S+) \((\S+)\)", b)
        if not m:
            continue
        body = b.split("-" * 70 + "\n")
        exc = ""
        for part in body:
            found = re.findall(r"^(\w[\w.]*(?:Error|Exception|Failure)\b.*)$", part, re.M)
            if found:
                exc = found[-1]
                break
        sql = [l for l in b.splitlines() if re.match(r"\(\d+\.\d+\) ", l)]
        lines.append(f"{m.group(1)}: {m.group(2)} -> {exc}")
        for l in sql[-2:]:
            lines.append("    " + clip(l))
    summary = re.findall(r"^(Ran \d+ tests? in .*|OK.*|FAILED \(.*\))$", text, re.M)
    lines.extend(summary)
    if not any(l.startswith(("ERROR", "FAIL:")) for l in lines):
        lines.append(tail_text(err, 40))
    return "\n".join(lines)


def check_inspectdb(out, err):
    want = {
        "ShopCustomer": [r"id = models\.BigAutoField\(primary_key=True\)",
                         r"email = models\.CharField\(unique=True, max_length=254\)",
                         r"profile = models\.JSONField\(\)",
                         r"created_at = models\.DateTimeField\(\)",
                         r"loyalty_points = models\.IntegerField\(\)",
                         r"phone = models\.CharField\(max_length=30, blank=True, null=True\)"],
        "ShopOrder": [r"customer = models\.ForeignKey\(ShopCustomer, models\.DO_NOTHING\)",
                      r"referrer = models\.ForeignKey\(ShopCustomer, models\.DO_NOTHING, "
                      r"related_name='shoporder_referrer_set', blank=True, null=True\)",
                      r"state = models\.CharField\(max_length=20\)"],
        "ShopOrderline": [r"order = models\.ForeignKey\(ShopOrder, models\.DO_NOTHING\)",
                          r"quantity = models\.IntegerField\(\)",
                          r"unique_together = \(\('order', 'product'\),\)"],
        "ShopProduct": [r"sku = models\.CharField\(unique=True, max_length=20\)",
                        r"price = models\.DecimalField\(max_digits=10, decimal_places=2\)",
                        r"labels = models\.TextField\(\)  # This field type is a guess\."],
        "ShopProductTags": [r"product = models\.ForeignKey\(ShopProduct, models\.DO_NOTHING\)",
                            r"tag = models\.ForeignKey\('ShopTag', models\.DO_NOTHING\)"],
        "ShopTag": [r"name = models\.CharField\(unique=True, max_length=30\)"],
    }
    missing = []
    for cls, patterns in want.items():
        m = re.search(rf"^class {cls}\(models\.Model\):\n(.*?)(?=^class |\Z)", out, re.S | re.M)
        if not m:
            missing.append(f"class {cls}")
            continue
        for p in patterns:
            if not re.search(p, m.group(1)):
                missing.append(f"{cls}: /{p}/")
    if missing:
        raise AssertionError("inspectdb output lacks:\n  " + "\n  ".join(missing) + "\n--- its output (first 40 lines):\n" + "\n".join(out.splitlines()[:40]))


def main():
    if os.path.exists(SQL_LOG):
        os.remove(SQL_LOG)
    ok = manage("migrate-initial", "migrate", "shop", "0001", "--noinput")
    if ok is None:
        checks.finish()
    checks.step("schema-0001", check_0001)
    checks.step("seed-0001", seed_0001)
    manage("migrate-0002", "migrate", "shop", "--noinput")
    checks.step("schema-0002", check_0002)
    manage("migrate-back-to-0001", "migrate", "shop", "0001", "--noinput")
    checks.step("schema-rolled-back", check_rolled_back)
    manage("migrate-0002-again", "migrate", "--noinput")
    checks.step("schema-0002-again", lambda: checks.expect(
        "shop_customer columns", sorted(columns("shop_customer")), sorted(CUSTOMER_0002)))
    manage("makemigrations-check", "makemigrations", "--check", "--dry-run")
    checks.step("clear-seed", clear_seed)
    # The test runner reuses this database (settings: TEST NAME = NAME, and
    # --keepdb) since Aqueduct has no CREATE DATABASE.
    manage("test", "test", "shop", "--keepdb", "--noinput", "-v", "2", "--debug-sql", timeout=600,
           check_output=check_test_result, summarize=summarize_tests, show_sql=False)
    manage("inspectdb", "inspectdb", *SHOP_TABLES, check_output=check_inspectdb)
    checks.finish()


if __name__ == "__main__":
    main()
