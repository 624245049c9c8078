"""Tests of instance.py: which instance of a pool a run measured, as the run file holds it."""

import math

import pytest

from router_latency.errors import RouterLatencyError
from router_latency.instance import Instance, INSTANCE_FACT


def test_an_instance_reads_back_what_it_writes_with_its_pool_size_as_count():
    item = Instance(2, "gpu", 3, 8, port=8803, gpu="2", cores="4-7",
                    facts={"numa_nodes": "0", "ready_s": 13.4, "start_order": 5})
    document = item.to_json()
    assert document["count"] == 8 and "pool_size" not in document
    assert Instance.from_json(document, "instance") == item
    assert Instance.from_json(None, "instance") is None  # a run of no pool (run/1, run/2)


@pytest.mark.parametrize("change, field, said", [
    ({"number": 9}, "instance.number", "instance 9 of 2"),
    ({"round": 0}, "instance.round", "expected a whole number >= 1"),
    ({"count": 1.5}, "instance.count", "expected a whole number >= 1"),
    ({"port": True}, "instance.port", "expected a whole number >= 1"),
    ({"gpu": 2}, "instance.gpu", "expected a string"),
    ({"side": None}, "instance.side", "expected a string"),
    ({"facts": {"Bad-Name": 1}}, "instance.facts", "expected facts named in lowercase"),
    ({"facts": {"warm": True}}, "instance.facts", "expected facts named in lowercase"),
    ({"facts": {"clock": math.nan}}, "instance.facts", "expected facts named in lowercase"),
    ({"facts": {"clock": [1]}}, "instance.facts", "expected facts named in lowercase"),
])
def test_an_instance_of_the_wrong_shape_is_refused_naming_its_field(change, field, said):
    document = {**Instance(1, "gpu", 1, 2, port=8801).to_json(), **change}
    with pytest.raises(RouterLatencyError) as raised:
        Instance.from_json(document, "instance")
    assert raised.value.where == field and said in str(raised.value.args[0])


def test_a_fact_is_a_lowercase_name_of_at_most_forty_characters():
    assert INSTANCE_FACT.fullmatch("gpu_bus_id") and INSTANCE_FACT.fullmatch("a" * 40)
    assert not INSTANCE_FACT.fullmatch("a" * 41) and not INSTANCE_FACT.fullmatch("1gpu")
