"""Django ORM against Aqueduct: every test compares the ORM's answer with the
expected one, so a wrong result fails as surely as an error."""
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import Count, F, Q, Sum
from django.test import TestCase, TransactionTestCase
from django.utils import timezone

from .models import Customer, Order, OrderLine, Product, Tag


def make_shop():
    """Three customers, three products with tags and labels, four orders."""
    alice = Customer.objects.create(
        email="alice@example.com", name="Alice",
        profile={"tier": "gold", "address": {"city": "Oslo"}, "tags": ["a", "b"]},
    )
    bob = Customer.objects.create(
        email="bob@example.com", name="Bob", phone="555-0101",
        profile={"tier": "silver", "address": {"city": "Bergen"}},
    )
    carol = Customer.objects.create(email="carol@example.com", name="Carol", profile={})
    red, blue, sale = (Tag.objects.create(name=n) for n in ("red", "blue", "sale"))
    mug = Product.objects.create(sku="MUG-1", title="Mug", price=Decimal("7.50"), labels=["kitchen", "gift"])
    hat = Product.objects.create(sku="HAT-1", title="Hat", price=Decimal("19.99"), labels=["clothing"])
    pen = Product.objects.create(sku="PEN-1", title="Pen", price=Decimal("1.25"))
    mug.tags.add(red, sale)
    hat.tags.add(blue)
    pen.tags.add(red, blue)
    o1 = Order.objects.create(customer=alice)
    o2 = Order.objects.create(customer=alice, referrer=bob, state="paid")
    o3 = Order.objects.create(customer=bob, referrer=alice)
    o4 = Order.objects.create(customer=carol, referrer=bob)
    OrderLine.objects.create(order=o1, product=mug, quantity=2)
    OrderLine.objects.create(order=o1, product=pen, quantity=10)
    OrderLine.objects.create(order=o2, product=hat, quantity=1)
    OrderLine.objects.create(order=o3, product=mug, quantity=1)
    OrderLine.objects.create(order=o4, product=pen, quantity=3)
    return dict(alice=alice, bob=bob, carol=carol, red=red, blue=blue, sale=sale,
                mug=mug, hat=hat, pen=pen, o1=o1, o2=o2, o3=o3, o4=o4)


class CrudTests(TestCase):
    def setUp(self):
        self.s = make_shop()

    def test_create_defaults_and_auto_now_add(self):
        alice = Customer.objects.get(email="alice@example.com")
        self.assertIsInstance(alice.id, int)
        self.assertEqual(alice.loyalty_points, 0)
        self.assertIsNone(alice.phone)
        self.assertEqual(alice.profile["address"]["city"], "Oslo")
        now = timezone.now()
        self.assertIsNotNone(alice.created_at.tzinfo)
        self.assertLess(abs((now - alice.created_at).total_seconds()), 120)
        self.assertEqual(Order.objects.get(pk=self.s["o1"].pk).state, "new")
        self.assertEqual(Product.objects.get(sku="MUG-1").price, Decimal("7.50"))
        self.assertEqual(Product.objects.get(sku="PEN-1").labels, [])
        # BigAutoField ids increase.
        ids = list(Customer.objects.order_by("id").values_list("id", flat=True))
        self.assertEqual(ids, sorted(ids))
        self.assertEqual(len(set(ids)), 3)

    def test_unique_violation(self):
        with self.assertRaises(IntegrityError):
            with transaction.atomic():
                Customer.objects.create(email="alice@example.com", name="Another Alice")
        # The savepoint rolled back; the outer transaction goes on.
        self.assertEqual(Customer.objects.count(), 3)

    def test_filter_across_relations(self):
        # Customers who ordered something tagged red, distinct.
        names = list(
            Customer.objects.filter(orders__lines__product__tags__name="red")
            .distinct().order_by("name").values_list("name", flat=True)
        )
        self.assertEqual(names, ["Alice", "Bob", "Carol"])
        # Orders with a hat, whose customer is referred by nobody.
        self.assertEqual(
            list(Order.objects.filter(lines__product__sku="HAT-1").values_list("pk", flat=True)),
            [self.s["o2"].pk],
        )
        # Orders referred by Bob, by referrer email, ordered.
        self.assertEqual(
            list(Order.objects.filter(referrer__email="bob@example.com").order_by("pk")
                 .values_list("customer__name", flat=True)),
            ["Alice", "Carol"],
        )
        # Orders without a referrer (IS NULL across the nullable FK).
        self.assertEqual(
            list(Order.objects.filter(referrer__isnull=True).values_list("pk", flat=True)),
            [self.s["o1"].pk],
        )
        # Q objects with OR and NOT.
        got = set(Order.objects.filter(Q(state="paid") | ~Q(customer__name="Alice")).values_list("pk", flat=True))
        self.assertEqual(got, {self.s["o2"].pk, self.s["o3"].pk, self.s["o4"].pk})
        # select_related and prefetch_related give the same objects.
        lines = list(OrderLine.objects.select_related("order__customer", "product").order_by("pk"))
        self.assertEqual([(l.order.customer.name, l.product.sku) for l in lines][:2],
                         [("Alice", "MUG-1"), ("Alice", "PEN-1")])
        products = {p.sku: sorted(t.name for t in p.tags.all())
                    for p in Product.objects.prefetch_related("tags")}
        self.assertEqual(products, {"MUG-1": ["red", "sale"], "HAT-1": ["blue"], "PEN-1": ["blue", "red"]})

    def test_json_key_lookups(self):
        self.assertEqual(list(Customer.objects.filter(profile__tier="gold").values_list("name", flat=True)), ["Alice"])
        self.assertEqual(list(Customer.objects.filter(profile__address__city="Bergen").values_list("name", flat=True)), ["Bob"])
        self.assertEqual(
            sorted(Customer.objects.filter(profile__has_key="tier").values_list("name", flat=True)), ["Alice", "Bob"]
        )
        self.assertEqual(list(Customer.objects.filter(profile__contains={"tier": "silver"}).values_list("name", flat=True)), ["Bob"])
        self.assertEqual(list(Customer.objects.filter(profile__tags__1="b").values_list("name", flat=True)), ["Alice"])
        self.assertEqual(
            list(Customer.objects.filter(profile__tier__isnull=True).values_list("name", flat=True)), ["Carol"]
        )

    def test_array_field_lookups(self):
        self.assertEqual(list(Product.objects.filter(labels__contains=["gift"]).values_list("sku", flat=True)), ["MUG-1"])
        self.assertEqual(
            sorted(Product.objects.filter(labels__overlap=["gift", "clothing"]).values_list("sku", flat=True)),
            ["HAT-1", "MUG-1"],
        )
        self.assertEqual(list(Product.objects.filter(labels__len=2).values_list("sku", flat=True)), ["MUG-1"])
        self.assertEqual(list(Product.objects.filter(labels__0="clothing").values_list("sku", flat=True)), ["HAT-1"])
        mug = Product.objects.get(sku="MUG-1")
        mug.labels.append("sale")
        mug.save()
        self.assertEqual(Product.objects.get(sku="MUG-1").labels, ["kitchen", "gift", "sale"])

    def test_annotate_count(self):
        rows = list(
            Customer.objects.annotate(n=Count("orders")).order_by("-n", "name").values_list("name", "n")
        )
        self.assertEqual(rows, [("Alice", 2), ("Bob", 1), ("Carol", 1)])
        rows = list(Tag.objects.annotate(n=Count("products")).filter(n__gte=2).order_by("name").values_list("name", "n"))
        self.assertEqual(rows, [("blue", 2), ("red", 2)])
        # Grouped by a value, with a filtered count and a sum across a join.
        rows = list(
            Order.objects.values("customer__name")
            .annotate(orders=Count("id", distinct=True), items=Sum("lines__quantity"),
                      paid=Count("id", filter=Q(state="paid"), distinct=True))
            .order_by("customer__name")
        )
        self.assertEqual(rows, [
            {"customer__name": "Alice", "orders": 2, "items": 13, "paid": 1},
            {"customer__name": "Bob", "orders": 1, "items": 1, "paid": 0},
            {"customer__name": "Carol", "orders": 1, "items": 3, "paid": 0},
        ])
        self.assertEqual(OrderLine.objects.aggregate(total=Sum("quantity"))["total"], 17)

    def test_update(self):
        n = Order.objects.filter(customer__name="Alice").update(state="shipped")
        self.assertEqual(n, 2)
        self.assertEqual(sorted(Order.objects.values_list("state", flat=True)), ["new", "new", "shipped", "shipped"])
        OrderLine.objects.filter(product__sku="PEN-1").update(quantity=F("quantity") + 1)
        self.assertEqual(sorted(OrderLine.objects.filter(product__sku="PEN-1").values_list("quantity", flat=True)), [4, 11])
        bob = self.s["bob"]
        bob.loyalty_points = 42
        bob.save(update_fields=["loyalty_points"])
        self.assertEqual(Customer.objects.get(pk=bob.pk).loyalty_points, 42)

    def test_delete_cascade_and_set_null(self):
        bob = self.s["bob"]
        deleted, per_model = bob.delete()
        # Bob's order o3 and its one line go with him; o2 and o4 lose their referrer.
        self.assertEqual(per_model, {"shop.Customer": 1, "shop.Order": 1, "shop.OrderLine": 1})
        self.assertEqual(deleted, 3)
        self.assertFalse(Order.objects.filter(pk=self.s["o3"].pk).exists())
        self.assertEqual(OrderLine.objects.count(), 4)
        self.assertIsNone(Order.objects.get(pk=self.s["o2"].pk).referrer_id)
        self.assertIsNone(Order.objects.get(pk=self.s["o4"].pk).referrer_id)
        # M2M rows go with a deleted product's through table rows.
        self.s["hat"].lines.all().delete()
        self.s["hat"].delete()
        self.assertEqual(Product.tags.through.objects.filter(product_id=self.s["hat"].pk).count(), 0)
        self.assertEqual(Product.tags.through.objects.count(), 4)

    def test_select_for_update_in_atomic(self):
        with transaction.atomic():
            order = Order.objects.select_for_update().get(pk=self.s["o1"].pk)
            order.state = "locked"
            order.save()
            locked = list(Order.objects.select_for_update(of=("self",)).filter(customer__name="Alice").order_by("pk"))
            self.assertEqual([o.state for o in locked], ["locked", "paid"])
        self.assertEqual(Order.objects.get(pk=self.s["o1"].pk).state, "locked")


class CommittedTransactionTests(TransactionTestCase):
    """Real commits and rollbacks (no wrapping transaction); the runner
    empties the tables after each test (TRUNCATE)."""

    def test_atomic_commit_and_rollback(self):
        with transaction.atomic():
            c = Customer.objects.create(email="dave@example.com", name="Dave")
        try:
            with transaction.atomic():
                Order.objects.create(customer=c)
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        self.assertEqual(Customer.objects.count(), 1)
        self.assertEqual(Order.objects.count(), 0)
        with transaction.atomic():
            o = Order.objects.select_for_update().filter(customer=c).first()
            self.assertIsNone(o)
            Order.objects.create(customer=c, state="x")
        self.assertEqual(list(Order.objects.values_list("state", flat=True)), ["x"])
