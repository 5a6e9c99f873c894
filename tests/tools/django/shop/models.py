from django.contrib.postgres.fields import ArrayField
from django.db import models


class Customer(models.Model):
    id = models.BigAutoField(primary_key=True)
    email = models.EmailField(unique=True)
    name = models.CharField(max_length=100)
    phone = models.CharField(max_length=30, null=True, blank=True)
    loyalty_points = models.IntegerField(default=0)
    profile = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)


class Tag(models.Model):
    name = models.CharField(max_length=30, unique=True)


class Product(models.Model):
    sku = models.CharField(max_length=20, unique=True)
    title = models.CharField(max_length=200)
    price = models.DecimalField(max_digits=10, decimal_places=2)
    labels = ArrayField(models.CharField(max_length=20), default=list, blank=True)
    tags = models.ManyToManyField(Tag, related_name="products", blank=True)


class Order(models.Model):
    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="orders")
    referrer = models.ForeignKey(
        Customer, on_delete=models.SET_NULL, null=True, blank=True, related_name="referred_orders"
    )
    state = models.CharField(max_length=20, default="new")
    created_at = models.DateTimeField(auto_now_add=True)


class OrderLine(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines")
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="lines")
    quantity = models.IntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["order", "product"], name="orderline_order_product_uniq")]
