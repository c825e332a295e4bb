"""End-state equivalence: JSON subset, ignored paths, multisets, numbers."""

import pytest

from faultproxy.evaluator.checks.equivalence import canonical_json, subset_equal


def test_subset_allows_extra_keys_and_compares_recursively():
    actual = {"orders": {"1001": {"status": "refunded", "total": 2400, "items": [{"sku": "mug"}]}}, "x": 1}
    assert subset_equal({"orders": {"1001": {"status": "refunded"}}}, actual) == (True, [])
    ok, differences = subset_equal({"orders": {"1001": {"status": "paid"}}}, actual)
    assert not ok and differences == ['orders.1001.status: expected "paid", got "refunded"']
    ok, differences = subset_equal({"orders": {"1002": {}}}, actual)
    assert not ok and differences[0].startswith("orders.1002: missing")


def test_numbers_by_value_but_booleans_are_not_numbers():
    assert subset_equal({"a": 1}, {"a": 1.0})[0]
    assert subset_equal({"a": [1.0, 2]}, {"a": [1, 2.0]})[0]
    assert not subset_equal({"a": True}, {"a": 1})[0]
    assert not subset_equal({"a": 0}, {"a": False})[0]
    assert not subset_equal({"a": None}, {"a": 0})[0]
    assert canonical_json({"b": 1.0, "a": [2.0, 2.5]}) == '{"a":[2,2.5],"b":1}'


def test_ignored_paths_with_wildcards_are_skipped():
    expected = {"refunds": [{"order_id": "1001", "created_at": "2024-01-01"}]}
    actual = {"refunds": [{"order_id": "1001", "created_at": "2031-07-09", "id": "r1"}]}
    assert not subset_equal(expected, actual)[0]
    assert subset_equal(expected, actual, ignore=["refunds.*.created_at"])[0]
    # An ignored key may be missing altogether, and ignoring a parent skips everything under it.
    assert subset_equal({"meta": {"x": 1}, "a": 1}, {"a": 1}, ignore=["meta"])[0]


def test_lists_in_order_unless_declared_multiset():
    expected = {"order": {"items": [{"sku": "mug", "qty": 2}, {"sku": "tee", "qty": 1}]}}
    swapped = {"order": {"items": [{"sku": "tee", "qty": 1, "price": 5}, {"sku": "mug", "qty": 2}]}}
    assert not subset_equal(expected, swapped)[0]
    assert subset_equal(expected, swapped, multiset=["order.items"])[0]
    # With `*` in the multiset path, and multiplicity counts.
    assert subset_equal({"o": {"a": {"tags": ["x", "y", "x"]}}}, {"o": {"a": {"tags": ["x", "x", "y"]}}},
                        multiset=["o.*.tags"])[0]
    ok, differences = subset_equal({"tags": ["x", "y", "y"]}, {"tags": ["x", "x", "y"]}, multiset=["tags"])
    assert not ok and "no match" in differences[0]
    # Lengths must agree either way.
    assert not subset_equal({"tags": ["x"]}, {"tags": ["x", "y"]}, multiset=["tags"])[0]
    assert not subset_equal({"tags": ["x"]}, {"tags": ["x", "y"]})[0]


def test_multiset_pairing_is_not_greedy():
    # {"a": 1} matches both actual elements; a greedy pairing to the first would leave
    # {"a": 1, "b": 2} without a partner.
    expected = [{"a": 1}, {"a": 1, "b": 2}]
    actual = [{"a": 1, "b": 2}, {"a": 1, "b": 3}]
    assert subset_equal({"l": expected}, {"l": actual}, multiset=["l"])[0]


def test_multiset_elements_respect_ignore_under_the_list():
    expected = {"payments": [{"amount": 30, "created_at": "x"}, {"amount": 10, "created_at": "y"}]}
    actual = {"payments": [{"amount": 10, "created_at": "t2"}, {"amount": 30, "created_at": "t1"}]}
    assert subset_equal(expected, actual, ignore=["payments.*.created_at"], multiset=["payments"])[0]
    assert not subset_equal(expected, actual, multiset=["payments"])[0]


@pytest.mark.parametrize("expected,actual", [
    ({"a": {"b": 1}}, {"a": [1]}),
    ({"a": [1]}, {"a": {"0": 1}}),
    ("x", 1),
])
def test_type_mismatch_is_a_difference(expected, actual):
    ok, differences = subset_equal(expected, actual)
    assert not ok and "expected" in differences[0]


def test_differences_are_capped():
    expected = {str(i): i for i in range(100)}
    ok, differences = subset_equal(expected, {})
    assert not ok and len(differences) == 20
